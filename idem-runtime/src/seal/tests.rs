//! Unit tests of encryption at rest: key lists, sealing and opening, tampering, resealing.

use base64::Engine as _;
use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};

use super::format::{NONCE, RECEIPT, VERSION, VERSION_1, aad, encode_plain, hex};
use super::{
    Binding, KeyRing, KeyRingError, ResealError, SEALED, SealError, StoredResponse, open_record,
};
use crate::fingerprint::RequestHash;
use crate::store::{Completion, Outcome, Record, RecordState, Timestamp};

const HASH: &str = "5f2b0c9e";

fn ring() -> KeyRing {
    KeyRing::new("k2", [2; 32])
        .unwrap()
        .with_older("k1", [1; 32])
        .unwrap()
}

fn completion() -> Completion {
    Completion {
        outcome: Outcome::Completed,
        status: 201,
        headers: vec![("location".to_owned(), b"/v1/payments/pay_1".to_vec())],
        body: br#"{"customer_id":"cus_42","amount":"100.00"}"#.to_vec(),
        biz_no: Some("pay_1".to_owned()),
        expire_at: Some(Timestamp::from_millis(9)),
    }
}

/// The record a store would answer for `c`.
fn stored(c: &Completion) -> Record {
    Record {
        key: HASH.to_owned(),
        request_hash: RequestHash::of_bytes(b"r"),
        state: RecordState::Completed,
        operation_id: "op".to_owned(),
        fence: 1,
        status: Some(c.status),
        headers: c.headers.clone(),
        body: c.body.clone(),
        biz_no: c.biz_no.clone(),
        locked_at: Timestamp::from_millis(1),
        lease_until: Timestamp::from_millis(2),
        expire_at: Timestamp::from_millis(9),
        replay_until: None,
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(3),
        completed_at: Some(Timestamp::from_millis(3)),
    }
}

/// `c` sealed by `ring` for the record [`stored`] makes of it.
fn sealed_by(ring: &KeyRing, c: &Completion) -> Completion {
    ring.seal(HASH, "op", &RequestHash::of_bytes(b"r"), c)
        .unwrap()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn sealed_holds_nothing_readable_and_opens_to_the_original() {
    let c = completion();
    let sealed = sealed_by(&ring(), &c);
    assert_eq!((sealed.status, sealed.outcome), (201, Outcome::Completed));
    // The business number column holds the receipt: sealed too.
    let receipt = sealed.biz_no.as_deref().unwrap();
    assert!(
        receipt.starts_with(RECEIPT) && !receipt.contains("pay_1"),
        "{receipt}"
    );
    assert_eq!(sealed.expire_at, c.expire_at);
    for plain in [&b"cus_42"[..], b"100.00", b"pay_1", b"location"] {
        assert!(!contains(&sealed.body, plain));
        assert!(!contains(&sealed.headers[0].1, plain));
    }
    let opened = ring().open(HASH, stored(&sealed)).unwrap();
    assert_eq!(opened, stored(&c));
    // A fresh nonce every time.
    assert_ne!(sealed_by(&ring(), &c).body, sealed.body);
}

#[test]
fn plaintext_records_replay_only_while_the_ring_accepts_them() {
    let plain = stored(&completion());
    assert_eq!(
        ring().open(HASH, plain.clone()),
        Err(SealError::Unsealed("plaintext"))
    );
    let switching = ring().accepting_plaintext();
    assert_eq!(switching.open(HASH, plain.clone()).unwrap(), plain);
    // Without a ring at all, a plaintext record is what the handle writes.
    let key = crate::key::ScopedKey::new(&["t"], "op", "k").unwrap();
    assert_eq!(open_record(None, &key, plain.clone()).unwrap(), plain);
}

#[test]
fn a_processing_record_has_nothing_to_open() {
    let mut processing = stored(&completion());
    processing.state = RecordState::Processing;
    processing.status = None;
    processing.headers.clear();
    processing.body.clear();
    processing.biz_no = None;
    assert_eq!(ring().open(HASH, processing.clone()).unwrap(), processing);
}

/// A database writer changes what a replay depends on beside the ciphertext: the status (a
/// stored 402 replayed as 200), the request hash (another request handed this response),
/// the operation id (a response of an earlier operation of the key swapped back), the
/// state, or adds a header entry (which turned a sealed record into a "plaintext" one that
/// replayed its ciphertext). None opens.
#[test]
fn a_changed_binding_or_marker_does_not_open() {
    let sealed = stored(&sealed_by(&ring(), &completion()));
    assert!(ring().open(HASH, sealed.clone()).is_ok());
    let tampered = SealError::Tampered("k2".to_owned());
    let mut status = sealed.clone();
    status.status = Some(200);
    assert_eq!(ring().open(HASH, status), Err(tampered.clone()));
    let mut request = sealed.clone();
    request.request_hash = RequestHash::of_bytes(b"another request");
    assert_eq!(ring().open(HASH, request), Err(tampered.clone()));
    let mut operation = sealed.clone();
    operation.operation_id = "an earlier operation".to_owned();
    assert_eq!(ring().open(HASH, operation), Err(tampered.clone()));
    let mut state = sealed.clone();
    state.state = RecordState::FailedStored;
    assert_eq!(ring().open(HASH, state), Err(tampered));
    for ring in [ring(), ring().accepting_plaintext()] {
        let mut appended = sealed.clone();
        appended
            .headers
            .push(("content-type".to_owned(), b"text/plain".to_vec()));
        assert!(matches!(
            ring.open(HASH, appended),
            Err(SealError::Malformed(m)) if m.contains("altered")
        ));
    }
}

/// Format 1 bound the key id and key hash only: opened while the ring accepts plaintext
/// (the switch), refused otherwise, and resealed in the current format by `idem rekey`.
#[test]
fn format_1_opens_only_while_plaintext_is_accepted() {
    let c = completion();
    let v1 = sealed_in_format_1(&ring(), HASH, &c);
    assert_eq!(
        ring().open(HASH, stored(&v1)),
        Err(SealError::Unsealed("sealed in format 1"))
    );
    let opened = ring()
        .accepting_plaintext()
        .open(HASH, stored(&v1))
        .unwrap();
    assert_eq!(opened.body, c.body);
}

/// `c` sealed by `ring`'s primary as format 1 did, for the record of key hash `key_hash`.
fn sealed_in_format_1(ring: &KeyRing, key_hash: &str, c: &Completion) -> Completion {
    let (id, cipher) = &ring.keys[0];
    let nonce = [4u8; NONCE];
    let ciphertext = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: &encode_plain(c),
                aad: &aad(VERSION_1, id, key_hash, None),
            },
        )
        .unwrap();
    Completion {
        headers: vec![(
            SEALED.to_owned(),
            [&[VERSION_1][..], id.as_bytes()].concat(),
        )],
        body: [&nonce[..], &ciphertext].concat(),
        biz_no: None,
        ..c.clone()
    }
}

#[test]
fn an_older_key_still_opens_what_it_sealed() {
    let old = sealed_by(&KeyRing::new("k1", [1; 32]).unwrap(), &completion());
    let opened = ring().open(HASH, stored(&old)).unwrap();
    assert_eq!(opened.body, completion().body);
    let without = KeyRing::new("k2", [2; 32]).unwrap();
    assert_eq!(
        without.open(HASH, stored(&old)),
        Err(SealError::UnknownKey("k1".to_owned()))
    );
}

#[test]
fn a_flipped_byte_a_moved_row_or_another_key_does_not_open() {
    let sealed = stored(&sealed_by(&ring(), &completion()));
    for i in [0, NONCE, sealed.body.len() - 1] {
        let mut flipped = sealed.clone();
        flipped.body[i] ^= 1;
        assert_eq!(
            ring().open(HASH, flipped),
            Err(SealError::Tampered("k2".to_owned()))
        );
    }
    assert_eq!(
        ring().open("another-row", sealed.clone()),
        Err(SealError::Tampered("k2".to_owned()))
    );
    let same_id = KeyRing::new("k2", [9; 32]).unwrap();
    assert_eq!(
        same_id.open(HASH, sealed.clone()),
        Err(SealError::Tampered("k2".to_owned()))
    );
    // Relabelled to the older key's id: the id is bound too.
    let mut relabelled = sealed;
    relabelled.headers[0].1 = [&[VERSION][..], b"k1"].concat();
    assert_eq!(
        ring().open(HASH, relabelled),
        Err(SealError::Tampered("k1".to_owned()))
    );
}

#[test]
fn an_unknown_format_is_malformed() {
    let mut sealed = stored(&sealed_by(&ring(), &completion()));
    sealed.headers[0].1[0] = 7;
    assert!(matches!(
        ring().open(HASH, sealed),
        Err(SealError::Malformed(_))
    ));
}

#[test]
fn key_lists_parse_with_clear_errors() {
    let k = base64::engine::general_purpose::STANDARD.encode([5u8; 32]);
    let ring = KeyRing::parse(&format!(" a:{k} , b.2:{k}")).unwrap();
    assert_eq!(ring.ids().collect::<Vec<_>>(), ["a", "b.2"]);
    let unpadded = k.trim_end_matches('=');
    assert!(KeyRing::parse(&format!("a:{unpadded}")).is_ok());
    assert_eq!(KeyRing::parse(" , ").unwrap_err(), KeyRingError::Empty);
    assert!(matches!(
        KeyRing::parse(&k),
        Err(KeyRingError::BadEntry(e)) if e.ends_with('…') && e.len() < k.len()
    ));
    assert!(matches!(
        KeyRing::parse("a:AAAA"),
        Err(KeyRingError::BadKey { id, detail }) if id == "a" && detail == "3 bytes"
    ));
    assert!(matches!(
        KeyRing::parse("a:%%%"),
        Err(KeyRingError::BadKey { detail, .. }) if detail == "not base64"
    ));
    assert_eq!(
        KeyRing::parse(&format!("a:{k},a:{k}")).unwrap_err(),
        KeyRingError::DuplicateId("a".to_owned())
    );
    assert!(matches!(
        KeyRing::parse(&format!("a b:{k}")),
        Err(KeyRingError::BadId(_))
    ));
    let message = KeyRing::parse("a:AAAA").unwrap_err().to_string();
    assert!(message.contains("openssl rand -base64 32"), "{message}");
    assert!(!format!("{ring:?}").contains(&k));
}

/// What `idem rekey` does with each stored response: plaintext and older-key responses
/// come back sealed under the primary and open to the same response; one under the
/// primary is left alone; one that does not open is refused.
#[test]
fn reseal_moves_every_response_under_the_primary() {
    let hash = [9u8; 32];
    let c = completion();
    let b = Binding {
        operation_id: "op".to_owned(),
        request_hash: RequestHash::of_bytes(b"r"),
        status: c.status,
        state: RecordState::Completed,
    };
    let plain = StoredResponse {
        headers: crate::store::headers::encode_headers(&c.headers),
        body: c.body.clone(),
        biz_no: c.biz_no.clone(),
    };
    // A strict ring never seals a plaintext record: it binds nothing a writer could not
    // have changed.
    assert!(matches!(
        KeyRing::new("k1", [1; 32])
            .unwrap()
            .reseal_stored(&hash, &b, &plain),
        Err(ResealError::Open(SealError::Unsealed("plaintext")))
    ));
    let old = KeyRing::new("k1", [1; 32]).unwrap().accepting_plaintext();
    let under_k1 = old.reseal_stored(&hash, &b, &plain).unwrap().unwrap();
    assert_eq!(under_k1.sealed_under().unwrap().as_deref(), Some("k1"));
    assert!(
        under_k1
            .biz_no
            .as_deref()
            .is_some_and(|r| r.starts_with("idem-receipt:2:k1:")),
        "{:?}",
        under_k1.biz_no
    );
    let rotated = ring().accepting_plaintext();
    let v1 = sealed_in_format_1(&rotated, &hex(&hash), &c);
    let under_k2_v1 = StoredResponse {
        headers: crate::store::headers::encode_headers(&v1.headers),
        body: v1.body,
        biz_no: None,
    };
    for before in [&plain, &under_k1, &under_k2_v1] {
        let after = rotated.reseal_stored(&hash, &b, before).unwrap().unwrap();
        assert_eq!(after.sealed_under().unwrap().as_deref(), Some("k2"));
        let opened = KeyRing::new("k2", [2; 32])
            .unwrap()
            .open_stored(&hash, &b, &after)
            .unwrap();
        assert_eq!(opened.sealed_under.as_deref(), Some("k2"));
        assert_eq!(
            (opened.headers, opened.body),
            (c.headers.clone(), c.body.clone())
        );
        assert_eq!(opened.biz_no, c.biz_no);
        assert!(rotated.reseal_stored(&hash, &b, &after).unwrap().is_none());
    }
    let stranger = KeyRing::new("k3", [3; 32]).unwrap();
    assert!(matches!(
        stranger.reseal_stored(&hash, &b, &under_k1),
        Err(ResealError::Open(SealError::UnknownKey(id))) if id == "k1"
    ));
    let garbage = StoredResponse {
        headers: vec![7],
        ..plain
    };
    assert!(matches!(
        garbage.sealed_under(),
        Err(SealError::Malformed(_))
    ));
}

/// A remembered record whose response the purge freed proves what it is by its receipt: the
/// business number comes back only under the record's own binding and key hash, and a freed
/// record without a receipt (or with a changed one) is refused as a changed response is.
#[test]
fn a_freed_response_keeps_a_receipt_bound_to_its_record() {
    let key = crate::key::ScopedKey::new(&["t"], "op", "k").unwrap();
    let hash = key.hash_hex().to_string();
    let c = completion();
    let sealed = ring()
        .seal(&hash, "op", &RequestHash::of_bytes(b"r"), &c)
        .unwrap();
    let mut freed = stored(&sealed);
    (freed.headers, freed.body) = (Vec::new(), Vec::new());
    let open = |ring: Option<&KeyRing>, record: &Record| {
        super::format::open_remembered(ring, &key, record.clone())
    };
    assert_eq!(
        open(Some(&ring()), &freed).unwrap().biz_no,
        c.biz_no,
        "the receipt opens to the business number"
    );
    let tampered = |e: Result<Record, SealError>| matches!(e, Err(SealError::Tampered(_)));
    let mut forged = freed.clone();
    forged.status = Some(200);
    assert!(tampered(open(Some(&ring()), &forged)), "another status");
    let mut moved = freed.clone();
    moved.operation_id = "another operation".to_owned();
    assert!(tampered(open(Some(&ring()), &moved)), "another operation");
    let mut other_request = freed.clone();
    other_request.request_hash = RequestHash::of_bytes(b"other");
    assert!(
        tampered(open(Some(&ring()), &other_request)),
        "another request"
    );
    let elsewhere = crate::key::ScopedKey::new(&["t"], "op", "other").unwrap();
    assert!(matches!(
        super::format::open_remembered(Some(&ring()), &elsewhere, freed.clone()),
        Err(SealError::Tampered(_))
    ));
    // No receipt: written by someone who could not seal.
    let mut bare = freed.clone();
    bare.biz_no = Some("pay_forged".to_owned());
    assert!(matches!(
        open(Some(&ring()), &bare),
        Err(SealError::Unsealed(_))
    ));
    assert_eq!(
        open(Some(&ring().accepting_plaintext()), &bare)
            .unwrap()
            .biz_no
            .as_deref(),
        Some("pay_forged"),
        "while plaintext is accepted"
    );
    // A handle without a ring, or without the receipt's key.
    assert!(matches!(open(None, &freed), Err(SealError::UnknownKey(_))));
    let other_ring = KeyRing::new("k9", [9; 32]).unwrap();
    assert!(matches!(
        open(Some(&other_ring), &freed),
        Err(SealError::UnknownKey(_))
    ));
}

/// `idem rekey` of a remembered record whose response the purge freed: its receipt moves under
/// the primary key (rotation), is made from a plaintext business number (switching encryption
/// on, by a ring that accepts plaintext) or opened back to plaintext (switching it off); the
/// response columns stay empty.
#[test]
fn rekey_moves_the_receipt_of_a_freed_response() {
    let key = crate::key::ScopedKey::new(&["t"], "op", "k").unwrap();
    let hash: [u8; 32] = *key.hash();
    let c = completion();
    let k1 = KeyRing::new("k1", [1; 32]).unwrap();
    let sealed = k1
        .seal(&hex(&hash), "op", &RequestHash::of_bytes(b"r"), &c)
        .unwrap();
    let binding = Binding::of(&stored(&sealed));
    let freed = StoredResponse {
        headers: Vec::new(),
        body: Vec::new(),
        biz_no: sealed.biz_no.clone(),
    };
    assert!(freed.is_freed());
    assert_eq!(freed.sealed_under().unwrap().as_deref(), Some("k1"));
    assert_eq!(
        k1.reseal_stored(&hash, &binding, &freed).unwrap(),
        None,
        "current"
    );
    // Rotation: k2 primary, k1 kept to open.
    let rotated = ring();
    let moved = rotated
        .reseal_stored(&hash, &binding, &freed)
        .unwrap()
        .expect("resealed");
    assert!(moved.is_freed());
    assert_eq!(moved.sealed_under().unwrap().as_deref(), Some("k2"));
    let record = |biz_no: Option<String>| Record {
        headers: Vec::new(),
        body: Vec::new(),
        biz_no,
        ..stored(&sealed)
    };
    let only_k2 = KeyRing::new("k2", [2; 32]).unwrap();
    let opened = super::format::open_remembered(Some(&only_k2), &key, record(moved.biz_no.clone()));
    assert_eq!(opened.unwrap().biz_no, c.biz_no, "opens without k1");
    // Switched off: opened back to plaintext.
    let off = ring().sealing_nothing();
    let plain = off
        .reseal_stored(&hash, &binding, &moved)
        .unwrap()
        .expect("unsealed");
    assert!(plain.is_freed());
    assert_eq!(plain.biz_no, c.biz_no);
    assert_eq!(off.reseal_stored(&hash, &binding, &plain).unwrap(), None);
    // Switched on again: a strict ring refuses the plaintext, an accepting one seals it.
    assert!(matches!(
        only_k2.reseal_stored(&hash, &binding, &plain),
        Err(ResealError::Open(SealError::Unsealed("plaintext")))
    ));
    let on = only_k2.clone().accepting_plaintext();
    let receipt = on
        .reseal_stored(&hash, &binding, &plain)
        .unwrap()
        .expect("sealed");
    let opened = super::format::open_remembered(Some(&only_k2), &key, record(receipt.biz_no));
    assert_eq!(opened.unwrap().biz_no, c.biz_no);
}
