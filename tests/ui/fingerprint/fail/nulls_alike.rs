use std::collections::HashMap;

use idem::Fingerprint;

#[derive(Fingerprint)]
struct Patch {
    /// Absent: leave alone; `null`: clear.
    nickname: Option<Option<String>>,
    /// `{"k": null}`: remove k.
    metadata: HashMap<String, Option<String>>,
    /// Written with a function of its own: accepted.
    #[fingerprint(with = write_note)]
    note: Option<Option<String>>,
    /// Not hashed: accepted.
    #[fingerprint(skip)]
    cache: Option<Option<u8>>,
}

fn write_note(_: &Option<Option<String>>, w: &mut idem::fingerprint::CanonicalWriter<'_>) {
    w.null();
}

#[derive(Fingerprint, serde::Serialize)]
struct Range(
    u32,
    #[serde(skip_serializing_if = "Option::is_none")] Option<u32>,
    Option<u32>,
);

fn main() {}
