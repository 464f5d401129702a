// An `optional string` business number could be absent.
#[derive(Clone, PartialEq, prost::Message, idem::Snapshot)]
pub struct Payment {
    #[prost(string, optional, tag = "1")]
    #[snapshot(biz_no)]
    pub payment_id: Option<String>,
}

fn main() {}
