// The oneof enum of a message must derive `Fingerprint` too.
#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct Pay {
    #[prost(oneof = "pay::Method", tags = "1, 2")]
    pub method: Option<pay::Method>,
}

pub mod pay {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Method {
        #[prost(string, tag = "1")]
        Iban(String),
        #[prost(string, tag = "2")]
        Card(String),
    }
}

fn main() {}
