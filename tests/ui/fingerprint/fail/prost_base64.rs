// `base64` on a prost `bytes` field: already base64.
#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct Upload {
    #[prost(bytes = "vec", tag = "1")]
    #[fingerprint(base64)]
    pub content: Vec<u8>,
}

fn main() {}
