// An environment field of a prost message needs `field_attribute(.., "#[fingerprint(env)]")`.
#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct Pay {
    #[prost(int64, tag = "1")]
    pub amount_minor: i64,
    #[prost(string, tag = "2")]
    pub client_ip: String,
}

fn main() {}
