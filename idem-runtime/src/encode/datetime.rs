//! Timestamps and dates (`docs/fingerprint.md`, "Timestamps and dates"): parsing RFC 3339 at run
//! time and writing the canonical `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, shared by the run-time
//! canonicalizer and the chrono/time `Canonical` impls (which write without allocating).

use super::sink::Sink;

/// A point in time in UTC, as canonical text components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timestamp {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    /// 0..=60 (60 only for a leap second, kept as given).
    pub second: u32,
    /// 0..1_000_000_000.
    pub nanos: u32,
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (era * 400 + yoe + i64::from(month <= 2), month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Timestamp {
    /// This date-time read as local time `offset_seconds` east of UTC, converted to UTC. A leap
    /// second (60) is converted as 59 and kept as 60.
    pub(crate) fn to_utc(self, offset_seconds: i64) -> Timestamp {
        let Timestamp {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanos,
        } = self;
        let secs = days_from_civil(year, month, day) * 86_400
            + i64::from(hour) * 3600
            + i64::from(minute) * 60
            + i64::from(second.min(59))
            - offset_seconds;
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        let tod = secs.rem_euclid(86_400) as u32;
        Timestamp {
            year,
            month,
            day,
            hour: tod / 3600,
            minute: tod / 60 % 60,
            second: if second == 60 { 60 } else { tod % 60 },
            nanos,
        }
    }

    /// Appends `"YYYY-MM-DDTHH:MM:SS[.fraction]Z"` (quoted), the fraction without trailing zeros.
    pub(crate) fn write<O: Sink + ?Sized>(&self, out: &mut O) {
        out.put_byte(b'"');
        write_ymd(out, self.year, self.month, self.day);
        out.put_byte(b'T');
        push2(out, self.hour);
        out.put_byte(b':');
        push2(out, self.minute);
        out.put_byte(b':');
        push2(out, self.second);
        if self.nanos > 0 {
            let mut digits = [0u8; 9];
            let mut n = self.nanos;
            for d in digits.iter_mut().rev() {
                *d = b'0' + (n % 10) as u8;
                n /= 10;
            }
            let len = 9 - digits.iter().rev().take_while(|&&d| d == b'0').count();
            out.put_byte(b'.');
            out.put(&digits[..len]);
        }
        out.put(b"Z\"");
    }
}

/// Appends `"YYYY-MM-DD"` (quoted).
pub(crate) fn write_date<O: Sink + ?Sized>(out: &mut O, year: i64, month: u32, day: u32) {
    out.put_byte(b'"');
    write_ymd(out, year, month, day);
    out.put_byte(b'"');
}

/// `YYYY-MM-DD`; years outside 0..=9999 (which only the typed path can produce) in ISO 8601's
/// expanded form with a sign, as chrono writes them.
fn write_ymd<O: Sink + ?Sized>(out: &mut O, year: i64, month: u32, day: u32) {
    if !(0..=9999).contains(&year) {
        out.put_byte(if year < 0 { b'-' } else { b'+' });
    }
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(year.unsigned_abs());
    out.put_repeat(b'0', 4usize.saturating_sub(digits.len()));
    out.put(digits.as_bytes());
    out.put_byte(b'-');
    push2(out, month);
    out.put_byte(b'-');
    push2(out, day);
}

fn push2<O: Sink + ?Sized>(out: &mut O, v: u32) {
    out.put(&[b'0' + (v / 10 % 10) as u8, b'0' + (v % 10) as u8]);
}

/// Reads `n` ASCII digits at `*pos`.
fn digits(s: &[u8], pos: &mut usize, n: usize) -> Option<u32> {
    let d = s.get(*pos..*pos + n)?;
    if !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    *pos += n;
    Some(d.iter().fold(0, |acc, &b| acc * 10 + u32::from(b - b'0')))
}

fn expect(s: &[u8], pos: &mut usize, b: u8) -> bool {
    let ok = s.get(*pos) == Some(&b);
    *pos += usize::from(ok);
    ok
}

/// `YYYY-MM-DD` at `*pos`.
fn parse_ymd(s: &[u8], pos: &mut usize) -> Result<(i64, u32, u32), &'static str> {
    const SHAPE: &str = "the date must be `YYYY-MM-DD`";
    let year = digits(s, pos, 4).ok_or(SHAPE)?;
    if !expect(s, pos, b'-') {
        return Err(SHAPE);
    }
    let month = digits(s, pos, 2).ok_or(SHAPE)?;
    if !expect(s, pos, b'-') {
        return Err(SHAPE);
    }
    let day = digits(s, pos, 2).ok_or(SHAPE)?;
    let year = i64::from(year);
    if !(1..=12).contains(&month) {
        return Err("the month is not 01..12");
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err("the day does not exist in that month");
    }
    Ok((year, month, day))
}

/// A date `YYYY-MM-DD`, nothing else.
pub(crate) fn parse_date(text: &str) -> Result<(i64, u32, u32), &'static str> {
    let s = text.as_bytes();
    let mut pos = 0;
    let ymd = parse_ymd(s, &mut pos)?;
    if pos != s.len() {
        return Err("unexpected text after the date");
    }
    Ok(ymd)
}

/// An RFC 3339 date-time converted to UTC. Accepted: `T`, `t` or a space between date and time;
/// a fraction of 1 or more digits (at most 9 significant: nanoseconds); second 60 (a leap
/// second, kept); offset `Z`, `z`, `+HH:MM` or `-HH:MM`. Also accepted, for the `time` crate's
/// human-readable serde forms: a space before the offset, offset seconds (`+01:00:00`), and no
/// offset at all (read as UTC).
pub(crate) fn parse_timestamp(text: &str) -> Result<Timestamp, &'static str> {
    const SHAPE: &str = "expected `YYYY-MM-DDTHH:MM:SS[.fraction]` and `Z` or `+HH:MM`";
    let s = text.as_bytes();
    let mut pos = 0;
    let (year, month, day) = parse_ymd(s, &mut pos)?;
    if !matches!(s.get(pos), Some(b'T' | b't' | b' ')) {
        return Err(SHAPE);
    }
    pos += 1;
    let hour = digits(s, &mut pos, 2).ok_or(SHAPE)?;
    if !expect(s, &mut pos, b':') {
        return Err(SHAPE);
    }
    let minute = digits(s, &mut pos, 2).ok_or(SHAPE)?;
    if !expect(s, &mut pos, b':') {
        return Err(SHAPE);
    }
    let second = digits(s, &mut pos, 2).ok_or(SHAPE)?;
    if hour > 23 || minute > 59 || second > 60 {
        return Err("the time of day is out of range");
    }
    let mut nanos = 0u32;
    if expect(s, &mut pos, b'.') {
        let start = pos;
        while s.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        let frac = &s[start..pos];
        if frac.is_empty() {
            return Err("expected digits after `.`");
        }
        let significant = frac.len() - frac.iter().rev().take_while(|&&d| d == b'0').count();
        if significant > 9 {
            return Err("more precise than nanoseconds");
        }
        for i in 0..9 {
            nanos = nanos * 10 + frac.get(i).map_or(0, |&d| u32::from(d - b'0'));
        }
    }
    if s.get(pos) == Some(&b' ') && pos + 1 < s.len() {
        pos += 1;
    }
    let offset = match s.get(pos) {
        None => 0,
        Some(b'Z' | b'z') => {
            pos += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            pos += 1;
            let h = digits(s, &mut pos, 2).ok_or(SHAPE)?;
            if !expect(s, &mut pos, b':') {
                return Err(SHAPE);
            }
            let m = digits(s, &mut pos, 2).ok_or(SHAPE)?;
            let sec = if expect(s, &mut pos, b':') {
                digits(s, &mut pos, 2).ok_or(SHAPE)?
            } else {
                0
            };
            if h > 23 || m > 59 || sec > 59 {
                return Err("the offset is out of range");
            }
            let total = i64::from(h * 3600 + m * 60 + sec);
            if sign == b'-' { -total } else { total }
        }
        Some(_) => return Err(SHAPE),
    };
    if pos != s.len() {
        return Err("unexpected text after the offset");
    }
    let local = Timestamp {
        year,
        month,
        day,
        hour,
        minute,
        second,
        nanos,
    };
    let ts = local.to_utc(offset);
    if !(0..=9999).contains(&ts.year) {
        return Err("the year is outside 0000..9999 in UTC");
    }
    Ok(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> Result<String, &'static str> {
        parse_timestamp(text).map(|ts| {
            let mut out = Vec::new();
            ts.write(&mut out);
            String::from_utf8(out).unwrap().trim_matches('"').to_owned()
        })
    }

    #[test]
    fn converts_to_utc_and_trims_fractions() {
        for (input, want) in [
            ("2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"),
            ("2024-01-02T03:04:05.120Z", "2024-01-02T03:04:05.12Z"),
            ("2024-01-02T03:04:05.000000000Z", "2024-01-02T03:04:05Z"),
            ("2024-01-02t03:04:05.5z", "2024-01-02T03:04:05.5Z"),
            ("2024-01-02 03:04:05+01:00", "2024-01-02T02:04:05Z"),
            ("2024-01-01T00:30:00+01:00", "2023-12-31T23:30:00Z"),
            ("2023-12-31T23:30:00-01:00", "2024-01-01T00:30:00Z"),
            ("2024-02-28T23:00:00-02:00", "2024-02-29T01:00:00Z"),
            ("2024-01-02T03:04:05-00:00", "2024-01-02T03:04:05Z"),
            (
                "2024-01-02T03:04:05.123456789+05:30",
                "2024-01-01T21:34:05.123456789Z",
            ),
            (
                "2024-01-02 03:04:05.12 +02:00:00",
                "2024-01-02T01:04:05.12Z",
            ),
            ("2024-01-02 03:04:05.0", "2024-01-02T03:04:05Z"),
            ("2016-12-31T23:59:60Z", "2016-12-31T23:59:60Z"),
            ("2017-01-01T00:59:60+01:00", "2016-12-31T23:59:60Z"),
            (
                "2024-01-02T03:04:05.1000000000000Z",
                "2024-01-02T03:04:05.1Z",
            ),
        ] {
            assert_eq!(canon(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_what_is_not_rfc_3339() {
        for bad in [
            "",
            "2024-01-02",
            "2024-1-02T03:04:05Z",
            "2024-01-02T03:04Z",
            "2024-01-02T24:00:00Z",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-02T03:04:05.Z",
            "2024-01-02T03:04:05.1234567891Z",
            "2024-01-02T03:04:05+0100",
            "2024-01-02T03:04:05+24:00",
            "2024-01-02T03:04:05Zx",
            "2024-01-02T03:04:05 ",
            "0000-01-01T00:00:00+00:01",
            "9999-12-31T23:59:59-00:01",
            "+2024-01-02T03:04:05Z",
        ] {
            assert!(canon(bad).is_err(), "{bad:?} -> {:?}", canon(bad));
        }
    }

    #[test]
    fn civil_days_round_trip() {
        for days in (-800_000..3_000_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(19_724), (2024, 1, 2));
    }

    #[test]
    fn dates_and_expanded_years() {
        assert_eq!(parse_date("2024-02-29"), Ok((2024, 2, 29)));
        assert!(parse_date("2023-02-29").is_err());
        assert!(parse_date("2024-01-02T00:00:00Z").is_err());
        let mut out = Vec::new();
        write_date(&mut out, 12345, 1, 2);
        write_date(&mut out, -1, 12, 31);
        write_date(&mut out, 7, 3, 4);
        assert_eq!(out, br#""+12345-01-02""-0001-12-31""0007-03-04""#);
    }
}
