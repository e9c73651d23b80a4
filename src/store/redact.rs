//! Secrets kept out of messages and logs: every password a `DATABASE_URL`
//! (or the card network's URL) can hold, in each form libpq reads.

/// `DATABASE_URL` with every password replaced by `***`, for messages and
/// logs, in each form libpq reads: a URL's `user:password@` and its
/// `password=` or `sslpassword=` query parameters (in any case, the name
/// percent-decoded as libpq decodes it), and the same keywords in a
/// `key=value` connection string (`host=db password='se cret'`), including a
/// URL given there as `dbname`. Written by hand rather than with a URL
/// parser, so that what no URL parser accepts is redacted too: a libpq
/// multi-host URL (`host1:5432,host2:5432`), or a password with an unencoded
/// `@`, `#`, `/` or `?` (libpq fails on some of these, and its error is
/// exactly where the URL would be printed). When in doubt it hides more: in
/// `postgres://h:5432/db?user=a@b` everything between `:` and the last `@`.
pub fn redact(url: &str) -> String {
    redact_collecting(url, &mut Vec::new())
}

/// `message`, an error about `url`, with each of the URL's secrets replaced
/// by `***`, and any quoted text that is part of one: libpq quotes what it
/// could not read (`invalid integer value "pa" for connection option
/// "port"` for `postgres://u:pa/ss@h/db`), which may be a piece of a password.
pub fn redact_message(message: &str, url: &str) -> String {
    let mut secrets = Vec::new();
    redact_collecting(url, &mut secrets);
    secrets.retain(|s| !s.is_empty());
    let mut out = String::with_capacity(message.len());
    let mut parts = message.split('"').peekable();
    let mut quoted = false;
    while let Some(part) = parts.next() {
        // Inside quotes only if the quote closes.
        if quoted
            && parts.peek().is_some()
            && !part.is_empty()
            && secrets.iter().any(|s| s.contains(part))
        {
            out.push_str("***");
        } else {
            out.push_str(part);
        }
        if parts.peek().is_some() {
            out.push('"');
        }
        quoted = !quoted;
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in &secrets {
        out = out.replace(secret.as_str(), "***");
    }
    out
}

/// [`redact`], adding each value it hides to `secrets`.
fn redact_collecting(url: &str, secrets: &mut Vec<String>) -> String {
    match url.find("://") {
        Some(i) if is_scheme(&url[..i]) => redact_url(url, i + "://".len(), secrets),
        _ => redact_conninfo(url, secrets),
    }
}

const SECRET_KEYWORDS: [&str; 2] = ["password", "sslpassword"];

fn is_secret_keyword(name: &str) -> bool {
    SECRET_KEYWORDS
        .iter()
        .any(|k| k.eq_ignore_ascii_case(name.trim()))
}

fn is_scheme(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `url` whose authority starts at `start`.
fn redact_url(url: &str, start: usize, secrets: &mut Vec<String>) -> String {
    let rest = &url[start..];
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start]);
    let host_start = userinfo_end(rest).map(|at| at + 1);
    let after_userinfo = match host_start {
        Some(host_start) => {
            let userinfo = &rest[..host_start - 1];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                    let password = &userinfo[colon + 1..];
                    secrets.extend([password.to_owned(), percent_decode(password)]);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            &rest[host_start..]
        }
        None => rest,
    };
    // libpq has no fragments: a '#' after the '?' is part of a value.
    match after_userinfo.split_once('?') {
        Some((host_and_path, query)) => {
            out.push_str(host_and_path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if is_secret_keyword(&percent_decode(name)) => {
                        secrets.extend([value.to_owned(), percent_decode(value)]);
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(after_userinfo),
    }
    out
}

/// Where the userinfo of `authority_on` (a URL after its `scheme://`) ends:
/// the last '@' before the query (the first '?' after the first '@'), so
/// that a password holding '@', '/', '?' or '#' is hidden whole, and so is
/// everything up to the host of a URL that is malformed that way.
fn userinfo_end(authority_on: &str) -> Option<usize> {
    let first = authority_on.find('@')?;
    let query = authority_on[first..]
        .find('?')
        .map_or(authority_on.len(), |i| first + i);
    authority_on[..query].rfind('@')
}

/// Whether `url`'s user name or password holds a '/' or an '@' not written
/// as `%2F` / `%40`: libpq then reads part of the password as the host or
/// the database, and would name it in its error.
pub fn malformed_userinfo(url: &str) -> bool {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return false;
    };
    let rest = &url[start..];
    userinfo_end(rest).is_some_and(|end| rest[..end].contains(['/', '@']))
}

/// `%XX` decoded (as libpq decodes a URL's parameter names); anything else,
/// a malformed escape included, as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A libpq `key=value` connection string, its secret values as `***`:
/// values are single-quoted (`\'` and `\\` escaped inside) or end at white
/// space (a backslash escapes the next character). A secret keyword not
/// followed by `=` (libpq's error) still has the next word hidden.
fn redact_conninfo(conninfo: &str, secrets: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(conninfo.len());
    let mut rest = conninfo;
    loop {
        let word = rest.trim_start();
        out.push_str(&rest[..rest.len() - word.len()]);
        if word.is_empty() {
            return out;
        }
        let keyword_len = word
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(word.len());
        let (keyword, after) = word.split_at(keyword_len);
        out.push_str(keyword);
        // `keyword = value`: white space around '=' is allowed.
        let trimmed = after.trim_start();
        let (separator, value) = match trimmed.strip_prefix('=') {
            Some(v) => {
                let value = v.trim_start();
                (&after[..after.len() - value.len()], value)
            }
            None if is_secret_keyword(keyword) => (&after[..after.len() - trimmed.len()], trimmed),
            None => {
                rest = after;
                continue;
            }
        };
        out.push_str(separator);
        let value_len = conninfo_value_len(value);
        let raw = &value[..value_len];
        if is_secret_keyword(keyword) {
            out.push_str("***");
            secrets.push(raw.to_owned());
            let unquoted = raw.strip_prefix('\'').unwrap_or(raw);
            secrets.push(unquoted.strip_suffix('\'').unwrap_or(unquoted).to_owned());
        } else if raw.contains("://") {
            // libpq reads a `dbname` that is a URL as that URL.
            match raw.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
                Some(inner) => out.push_str(&format!("'{}'", redact_collecting(inner, secrets))),
                None => out.push_str(&redact_collecting(raw, secrets)),
            }
        } else {
            out.push_str(raw);
        }
        rest = &value[value_len..];
    }
}

/// The length of the value at the start of `s`, quotes and escapes included.
fn conninfo_value_len(s: &str) -> usize {
    let quoted = s.starts_with('\'');
    let mut chars = s.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if !quoted && c.is_whitespace() => return i,
            _ => {}
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn everything_up_to_the_last_at_before_the_host_is_secret_and_such_a_url_malformed() {
        use super::malformed_userinfo;
        use crate::store::database::Target;
        for (url, shown) in [
            (
                "postgres://app:p@ss/word@db.example:5432/charges",
                "postgres://app:***@db.example:5432/charges",
            ),
            (
                "postgres://app:pa/ss@h/db?sslmode=require",
                "postgres://app:***@h/db?sslmode=require",
            ),
            (
                "postgres://app:a@b@h/db?application_name=x@y",
                "postgres://app:***@h/db?application_name=x@y",
            ),
        ] {
            assert_eq!(redact(url), shown);
            assert!(malformed_userinfo(url), "{url}");
            let refused = Target::parse(url).unwrap_err().to_string();
            assert!(
                refused.contains("malformed") && refused.contains(shown),
                "{refused}"
            );
            for piece in ["ss/word", "pa/ss", "p@ss", "a@b"] {
                assert!(!refused.contains(piece), "{refused}");
            }
        }
        for fine in [
            "postgres://app:p%40ss%2Fword@h/db",
            "postgres://app@h/db?application_name=x@y",
            "postgres://u@h1:5432,h2:5433/db",
            "postgres://u:pa?ss@h/db",
        ] {
            assert!(!malformed_userinfo(fine), "{fine}");
        }
        assert_eq!(
            redact("http://netuser:NetPass123@net.example:8090"),
            "http://netuser:***@net.example:8090"
        );
    }

    #[test]
    fn passwords_are_redacted_in_the_userinfo_and_the_query() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/charges"),
            "postgres://app:***@db:5432/charges"
        );
        assert_eq!(
            redact("postgres://app@db/charges?password=s3cret&sslmode=require"),
            "postgres://app@db/charges?password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgresql://db/charges?sslmode=verify-full&sslpassword=pw"),
            "postgresql://db/charges?sslmode=verify-full&sslpassword=***"
        );
    }

    #[test]
    fn a_multi_host_url_is_redacted_too() {
        assert_eq!(
            redact(
                "postgres://app:pw@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write"
            ),
            "postgres://app:***@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write"
        );
    }

    #[test]
    fn urls_without_passwords_are_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/postgres",
            "sqlite://charges.db",
            "postgres://db/x?sslmode=disable",
            "postgres://user%40x@db/x",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn a_password_with_an_unencoded_hash_slash_or_question_mark_is_hidden_whole() {
        for (url, shown) in [
            ("postgres://u:pa#ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa?ss@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:a/b?c#d@e@h:5432/db?sslmode=require",
                "postgres://u:***@h:5432/db?sslmode=require",
            ),
            (
                "postgresql://u:p#w@h1:5432,h2:5433/db",
                "postgresql://u:***@h1:5432,h2:5433/db",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn password_query_parameters_are_hidden_in_any_case_and_encoding() {
        for (url, shown) in [
            (
                "postgres://h/db?PASSWORD=s3cret",
                "postgres://h/db?PASSWORD=***",
            ),
            (
                "postgres://h/db?sslmode=verify-full&SslPassword=s3cret",
                "postgres://h/db?sslmode=verify-full&SslPassword=***",
            ),
            // libpq decodes the names of query parameters too.
            (
                "postgres://h/db?pass%77ord=s3cret",
                "postgres://h/db?pass%77ord=***",
            ),
            (
                "postgres://h/db?password=s3cret#x",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://u:pw@h/db?password=s3cret",
                "postgres://u:***@h/db?password=***",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn a_key_value_connection_string_is_redacted_too() {
        for (conninfo, shown) in [
            (
                "host=db password=secret user=u",
                "host=db password=*** user=u",
            ),
            (
                "host=db password='se cret' user=u",
                "host=db password=*** user=u",
            ),
            (r"password='it\'s \\ se cret' user=u", "password=*** user=u"),
            ("host=db password = secret", "host=db password = ***"),
            (r"sslpassword=secret\ x host=db", "sslpassword=*** host=db"),
            ("PASSWORD=secret", "PASSWORD=***"),
            (
                "dbname=postgres://u:secret@h/db host=x",
                "dbname=postgres://u:***@h/db host=x",
            ),
            (
                "host=db user=u dbname=charges",
                "host=db user=u dbname=charges",
            ),
            // What libpq refuses is still hidden when the error prints it.
            ("password secret host=db", "password *** host=db"),
            (
                "host=db password='unterminated secret",
                "host=db password=***",
            ),
        ] {
            assert_eq!(redact(conninfo), shown, "{conninfo}");
        }
    }

    #[test]
    fn libpq_errors_quoting_a_piece_of_a_password_are_redacted_too() {
        use super::redact_message;
        for (message, url, shown) in [
            (
                r#"invalid integer value "pa" for connection option "port""#,
                "postgres://u:pa/ss@h/db",
                r#"invalid integer value "***" for connection option "port""#,
            ),
            (
                r#"unexpected spaces found in "pass word", use percent-encoded spaces (%20) instead"#,
                "postgres://u:pass word@h/db",
                r#"unexpected spaces found in "***", use percent-encoded spaces (%20) instead"#,
            ),
            (
                r#"invalid percent-encoded token: "s3c%ZZret""#,
                "postgres://u:s3c%ZZret@h/db",
                r#"invalid percent-encoded token: "***""#,
            ),
            (
                r#"missing "=" after "secret" in connection info string"#,
                "password secret",
                r#"missing "=" after "***" in connection info string"#,
            ),
            (
                "the password is p@ss w0rd, unquoted",
                "postgres://h/db?password=p%40ss%20w0rd",
                "the password is ***, unquoted",
            ),
            (
                r#"role "u" does not exist"#,
                "postgres://u:s3cret@h/db",
                r#"role "u" does not exist"#,
            ),
        ] {
            assert_eq!(redact_message(message, url), shown, "{url}");
        }
    }

    #[test]
    fn when_in_doubt_more_is_hidden() {
        // An '@' in the query of a URL with a port: "5432/db?user=a" could
        // be a password.
        assert_eq!(
            redact("postgres://h:5432/db?user=a@b"),
            "postgres://h:***@b"
        );
        assert_eq!(
            redact("postgres://h/db?user=a@b"),
            "postgres://h/db?user=a@b"
        );
    }

    #[test]
    fn a_password_containing_at_signs_is_hidden_whole() {
        assert_eq!(
            redact("postgres://app:p@ss@db/x"),
            "postgres://app:***@db/x"
        );
    }
}
