use idem::{Fingerprint, Idem, Snapshot, idempotent};
use tonic::{Request, Response, Status};

#[derive(Clone, PartialEq, prost::Message, Fingerprint)]
pub struct Pay {
    #[prost(string, tag = "1")]
    pub amount: String,
}

#[derive(Clone, PartialEq, prost::Message, Snapshot)]
pub struct Paid {
    #[prost(string, tag = "1")]
    #[snapshot(biz_no)]
    pub id: String,
}

pub struct Svc {
    idem: Idem,
}

impl idem::AsIdem for Svc {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

#[tonic::async_trait]
pub trait Payments: Send + Sync + 'static {
    async fn pay(&self, request: Request<Pay>) -> Result<Response<Paid>, Status>;
    async fn refund(&self, request: Request<Pay>) -> Result<Response<Paid>, Status>;
    async fn track(&self, request: Request<Pay>) -> Result<Response<Paid>, Status>;
    async fn charge(&self, request: Request<Pay>) -> Result<Response<Paid>, Status>;
}

impl Svc {
    async fn find(&self, id: String) -> Result<Response<Paid>, Status> {
        let _ = &self.idem;
        Ok(Response::new(Paid { id }))
    }
}

// The methods of a `#[tonic::async_trait]` impl, as tonic-build's traits want them.
#[tonic::async_trait]
impl Payments for Svc {
    #[idempotent(scope = [header("x-tenant-id")], ttl = "7d")]
    async fn pay(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        Ok(Response::new(Paid { id: request.into_inner().amount }))
    }

    #[idempotent(
        scope = default,
        contract = "latest_state",
        lookup = move |id| self.find(id),
        store = self.idem
    )]
    async fn refund(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        let _ = request;
        Err(Status::not_found("no such payment"))
    }

    #[idempotent(
        scope = global,
        contract = "suppress_only",
        key = request.get_ref().amount,
        operation = "payments.track",
        fingerprint(fields = [amount])
    )]
    async fn track(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        Ok(Response::new(Paid { id: request.get_ref().amount.clone() }))
    }

    #[idempotent(scope = global, transaction = tx)]
    async fn charge(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        let _: &mut idem::Tx<idem::AnySql> = &mut tx;
        Ok(Response::new(Paid { id: request.into_inner().amount }))
    }
}

// An inherent `async fn` in the same shape, and the atomic mode: `tx` is bound in the body.
impl Svc {
    #[idempotent(scope = global, transaction = tx)]
    pub async fn pay_atomically(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        let _: &mut idem::Tx<idem::AnySql> = &mut tx;
        Ok(Response::new(Paid { id: request.into_inner().amount }))
    }

    #[idempotent(scope = global, headers = ["x-trace"])]
    pub async fn pay_inherent(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        Ok(Response::new(Paid { id: request.into_inner().amount }))
    }
}

fn main() {}
