use idem::Fingerprint;

#[derive(Fingerprint)]
struct Upload {
    #[fingerprint(base64, float)]
    body: Vec<u8>,
}

fn main() {}
