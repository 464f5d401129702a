// The business number of a prost message must be a `string` field.
#[derive(Clone, PartialEq, prost::Message, idem::Snapshot)]
pub struct Payment {
    #[prost(int64, tag = "1")]
    #[snapshot(biz_no)]
    pub payment_no: i64,
    #[prost(string, tag = "2")]
    pub status: String,
}

fn main() {}
