// A proto2 group: refused, with what to write instead.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(string, optional, tag = "2")]
    pub sku: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct Order {
    #[prost(group, optional, tag = "1")]
    pub line: Option<Line>,
}

fn main() {}
