//! The syntax rows: malformed keys, and what the server made of each. RFC
//! 8941 says a field that fails to parse is ignored as a whole, so a
//! server may refuse the request (validating the key, as the draft's
//! section 5 recommends) or process it as one without a key; what it must
//! not do is take the raw value as a key. Sending the same request twice
//! tells the last two apart: ignored, it makes two resources; used as a
//! key, the second is a replay.

use uuid::Uuid;

use super::super::Verdict;
use super::context::{Ctx, First, Half, fill, new_key, new_marker, quoted};

pub(super) fn syntax(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    // Fresh keys for each case: a server that joins two lines into one
    // value must not see the list case's key again.
    let k = new_key;
    let long: String = std::iter::repeat_with(|| Uuid::new_v4().simple().to_string())
        .flat_map(|s| s.chars().collect::<Vec<_>>())
        .take(256)
        .collect();
    let cases: [(&'static str, Vec<Vec<u8>>); 5] = [
        ("syntax-empty", vec![Vec::new()]),
        (
            "syntax-list",
            vec![format!("\"{}\", \"{}\"", k(), k()).into_bytes()],
        ),
        ("syntax-two-fields", vec![quoted(&k()), quoted(&k())]),
        (
            "syntax-non-ascii",
            vec![format!("\"ключ-{}\"", k()).into_bytes()],
        ),
        ("syntax-too-long", vec![quoted(&long)]),
    ];
    for (id, lines) in cases {
        case(ctx, id, &lines)?;
    }
    Ok(())
}

/// What the server did with a malformed key.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Diagnosis {
    Refused(u16),
    /// Processed as a request without a key: two sends, two resources.
    Ignored,
    /// The raw value was stored and matched as a key.
    RawKey(String),
    /// Neither refused nor processed.
    Other(String),
}

fn case(ctx: &mut Ctx, id: &'static str, lines: &[Vec<u8>]) -> Result<(), String> {
    let marker = new_marker();
    let body = fill(&ctx.cfg.body, &marker);
    let request = ctx.request(&ctx.cfg.endpoint, lines, &body, None);
    let r = ctx.send(&request)?;
    ctx.refusal(id, &r);
    let diagnosis = match ctx.answer_id(&r) {
        _ if (400..500).contains(&r.status) && ctx.replayed_409(&r).is_none() => {
            Diagnosis::Refused(r.status)
        }
        None => Diagnosis::Other(r.summary()),
        Some(first) => {
            let again = ctx.send(&request)?;
            diagnose_repeat(ctx, &first, &again)
        }
    };
    let long = id == "syntax-too-long";
    match diagnosis {
        Diagnosis::Refused(status) => {
            let counted = ctx.expect_created(&marker, 0, "this request", None);
            ctx.settle(id, &[Half::Note(format!("refused ({status})")), counted]);
        }
        // A 256-character key is a valid sf-string: only a limit refuses it.
        Diagnosis::Ignored if long => ctx.set(id, Verdict::Fail, "accepted (ignored: no key)"),
        Diagnosis::RawKey(e) if long => ctx.set(id, Verdict::Fail, format!("accepted: {e}")),
        Diagnosis::Ignored => ctx.set(
            id,
            Verdict::Pass,
            "ignored (as RFC 8941 says): processed as a request without a key, the same again made another resource",
        ),
        Diagnosis::RawKey(e) => ctx.set(id, Verdict::Fail, format!("raw value used as a key: {e}")),
        Diagnosis::Other(e) => ctx.set(id, Verdict::Fail, e),
    }
    Ok(())
}

/// The same malformed request sent again after it made `first`.
pub(super) fn diagnose_repeat(ctx: &Ctx, first: &str, again: &super::http::Response) -> Diagnosis {
    match ctx.answer_id(again) {
        Some(second) if second != first => Diagnosis::Ignored,
        Some(_) => Diagnosis::RawKey(format!(
            "the same request again was answered with the first's resource {first} ({})",
            again.status
        )),
        None if matches!(again.status, 409 | 422) => Diagnosis::RawKey(format!(
            "it made {first}; the same request again answered {}",
            again.summary()
        )),
        None => Diagnosis::Other(format!(
            "it made {first}; the same request again answered {}",
            again.summary()
        )),
    }
}
