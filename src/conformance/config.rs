//! The command line of `charges conformance` and what the checks run with.

use std::time::Duration;

use clap::Args;

use super::http::{self, Origin};
use super::{DEFAULT_BODY, DEFAULT_INVALID_BODY, DEFAULT_SECOND_BODY};

/// The command line of `charges conformance`.
#[derive(Debug, Clone, Args)]
pub struct ConformanceArgs {
    /// The idempotent endpoint's URL, http:// only (e.g. http://127.0.0.1:8080/charges). A path (even "/") is used as given; with none at all: this API's /charges.
    pub url: String,
    /// A header sent with every request, e.g. 'Authorization: Bearer sk_…' (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// A second credential's header(s), replacing those of the same name: the key must be scoped per credential (repeatable).
    #[arg(long = "second-credential", value_name = "NAME: VALUE")]
    pub second_credential: Vec<String>,
    /// The JSON body (the default is this API's); {marker} becomes a value unique to each new request: put it in a field the --read-url list shows.
    #[arg(long, default_value = DEFAULT_BODY)]
    pub body: String,
    /// Another valid body, different from --body ({marker} as there).
    #[arg(long, default_value = DEFAULT_SECOND_BODY)]
    pub second_body: String,
    /// A body the endpoint refuses (e.g. with 400).
    #[arg(long, default_value = DEFAULT_INVALID_BODY)]
    pub invalid_body: String,
    /// Another idempotent endpoint's path, where the same key must be refused; {id} becomes the first resource's id (e.g. /charges/{id}/refunds).
    #[arg(long)]
    pub other_endpoint: Option<String>,
    /// The body for --other-endpoint (default: --body).
    #[arg(long)]
    pub other_endpoint_body: Option<String>,
    /// A URL (or path) whose GET lists what was created, read to count the resources each request made (e.g. /charges?limit=100).
    #[arg(long)]
    pub read_url: Option<String>,
    /// The member of a 2xx JSON answer that names the resource (else its Location header).
    #[arg(long, default_value = "id")]
    pub id_field: String,
    /// Requests sent at once with one key, in each burst.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Bursts of --concurrency requests, each with a key of its own: a race is hunted, not sampled once.
    #[arg(long, default_value_t = DEFAULT_BURSTS)]
    pub bursts: usize,
    /// How long one request may take.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// What the checks run with, parsed from [`ConformanceArgs`].
#[derive(Debug, Clone)]
pub struct Config {
    pub origin: Origin,
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    pub second_credential: Option<Vec<(String, String)>>,
    pub body: String,
    pub second_body: String,
    pub invalid_body: String,
    pub other_endpoint: Option<String>,
    pub other_endpoint_body: Option<String>,
    pub read_path: Option<String>,
    pub id_field: String,
    pub concurrency: usize,
    pub bursts: usize,
    pub timeout: Duration,
}

/// Enough bursts to catch a check-then-act race that one burst misses
/// (docs/conformance.md, "Races").
pub const DEFAULT_BURSTS: usize = 8;

fn header_line(line: &str) -> Result<(String, String), String> {
    match line.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{line:?}: a header is 'Name: value'")),
    }
}

impl Config {
    pub fn from_args(args: &ConformanceArgs) -> Result<Config, String> {
        let (origin, path) = http::parse_url(&args.url)?;
        // Only a bare origin means this API: `http://h/` names the root, and
        // another API's endpoint may well be there.
        let bare = args
            .url
            .strip_prefix("http://")
            .is_some_and(|rest| !rest.contains(['/', '?']));
        let endpoint = if bare { "/charges".to_owned() } else { path };
        let headers = args
            .headers
            .iter()
            .map(|h| header_line(h))
            .collect::<Result<Vec<_>, _>>()?;
        let second = args
            .second_credential
            .iter()
            .map(|h| header_line(h))
            .collect::<Result<Vec<_>, _>>()?;
        let read_path = match &args.read_url {
            None => None,
            Some(p) if p.starts_with('/') => Some(p.clone()),
            Some(url) => {
                let (read_origin, path) = http::parse_url(url)?;
                if read_origin != origin {
                    return Err(format!(
                        "--read-url {url}: must be on the endpoint's host and port"
                    ));
                }
                Some(path)
            }
        };
        for (flag, body) in [
            ("--body", &args.body),
            ("--second-body", &args.second_body),
            ("--invalid-body", &args.invalid_body),
        ] {
            if body.is_empty() {
                return Err(format!("{flag} is empty"));
            }
        }
        if args.body == args.second_body {
            return Err("--second-body must differ from --body".to_owned());
        }
        Ok(Config {
            origin,
            endpoint,
            headers,
            second_credential: (!second.is_empty()).then_some(second),
            body: args.body.clone(),
            second_body: args.second_body.clone(),
            invalid_body: args.invalid_body.clone(),
            other_endpoint: args.other_endpoint.clone(),
            other_endpoint_body: args.other_endpoint_body.clone(),
            read_path,
            id_field: args.id_field.clone(),
            // Bounded: each request is a thread and a connection.
            concurrency: args.concurrency.clamp(2, 500),
            bursts: args.bursts.clamp(1, 100),
            timeout: args.timeout,
        })
    }

    /// `http://host:port/path` of the endpoint, for the report.
    pub fn target(&self) -> String {
        let host = if self.origin.host.contains(':') {
            format!("[{}]", self.origin.host)
        } else {
            self.origin.host.clone()
        };
        format!("http://{host}:{}{}", self.origin.port, self.endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConformanceArgs,
    }

    fn config(args: &[&str]) -> Result<Config, String> {
        let cli = Cli::try_parse_from(std::iter::once("conformance").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        Config::from_args(&cli.args)
    }

    #[test]
    fn a_url_without_a_path_means_charges_and_flags_are_checked() {
        let c = config(&["http://127.0.0.1:8080", "-H", "Authorization: Bearer k"]).unwrap();
        assert_eq!(c.endpoint, "/charges");
        assert_eq!(
            c.headers,
            [("Authorization".to_owned(), "Bearer k".to_owned())]
        );
        assert_eq!(c.target(), "http://127.0.0.1:8080/charges");
        let c = config(&["http://h/orders", "--read-url", "http://h/orders?all"]).unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.read_path.as_deref()),
            ("/orders", Some("/orders?all"))
        );
        assert!(config(&["http://h/", "--read-url", "http://other/list"]).is_err());
        // Any path is the endpoint, the root too.
        assert_eq!(config(&["http://h/"]).unwrap().endpoint, "/");
        assert_eq!(
            config(&["http://h:8080/"]).unwrap().target(),
            "http://h:8080/"
        );
        assert_eq!(config(&["http://h?x=1"]).unwrap().endpoint, "/?x=1");
        assert!(config(&["http://h/", "-H", "no colon"]).is_err());
        assert!(config(&["http://h/", "--second-body", DEFAULT_BODY]).is_err());
        assert!(config(&["https://h/"]).unwrap_err().contains("https"));
    }
}
