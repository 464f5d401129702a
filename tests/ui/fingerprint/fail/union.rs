use idem::Fingerprint;

#[derive(Fingerprint)]
union Bits {
    int: u32,
    bytes: [u8; 4],
}

fn main() {}
