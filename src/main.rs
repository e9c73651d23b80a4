//! The `charges` command line: demo (the default), serve, migrate,
//! purge-expired, network, account create|revoke|list, conformance.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use charges::app::Application;
use charges::config::{
    DEFAULT_DATABASE_URL, DEFAULT_NETWORK_API_KEY, DEFAULT_PURGE_BATCH, Settings,
};
use charges::http::accounts;
use charges::store::{Connection, redact::redact};

#[derive(Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a command: `charges demo`.
    #[command(flatten)]
    demo: Settings,
}

#[derive(Subcommand)]
enum Command {
    /// The teaching page: serve with demo mode on, on loopback only (the default command).
    Demo(Box<Settings>),
    /// Run the migrations, then serve the API (demo mode only with DEMO=true).
    Serve(Box<Settings>),
    /// Run the pending migrations and exit.
    Migrate(DatabaseArgs),
    /// Delete expired idempotency keys once, print how many, and exit.
    PurgeExpired(PurgeArgs),
    /// Serve a card network of its own (the API's NETWORK_URL points at it).
    Network(NetworkArgs),
    /// Manage the accounts that may call the API.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Make a sandbox of the demo's for an integration and print its key (shown this once): a server in demo mode on this database confines its rows, keys and Demo-* faults to it.
    Sandbox(DatabaseArgs),
    /// Check any API's Idempotency-Key handling from outside (draft-07), as h2spec does for HTTP/2.
    Conformance(Box<charges::conformance::ConformanceArgs>),
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Create an account and print its new API key (shown this once only).
    Create {
        /// A name for the account, unique among live accounts.
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke an account's API key: running servers refuse it within ACCOUNT_CACHE_TTL.
    Revoke {
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List the accounts.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Args)]
struct PurgeArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// Rows deleted per statement.
    #[arg(long, env = "PURGE_BATCH", default_value_t = DEFAULT_PURGE_BATCH)]
    purge_batch: i64,
}

#[derive(Args)]
struct NetworkArgs {
    /// The network's own database: postgres://… or sqlite://….
    #[arg(
        long,
        env = "NETWORK_DATABASE_URL",
        default_value = "sqlite://network.db",
        hide_env_values = true
    )]
    database_url: String,
    /// Address to listen on.
    #[arg(long, env = "NETWORK_BIND", default_value = "127.0.0.1:8090")]
    bind: String,
    /// The merchant key the API calls it with.
    /// On an address other machines reach, the default is refused: set a secret.
    #[arg(long, env = "NETWORK_API_KEY", default_value = DEFAULT_NETWORK_API_KEY, hide_env_values = true)]
    api_key: String,
    /// How long it takes to answer an authorization (real networks take 100 ms to 2 s), e.g. 300ms.
    #[arg(long, env = "NETWORK_LATENCY", default_value = "0s", value_parser = humantime::parse_duration)]
    latency: std::time::Duration,
    /// How long an Idempotency-Key is kept at most (a caller that names its
    /// own key's lifetime, Idempotency-Key-Lifetime, gets that if shorter).
    #[arg(long, env = "NETWORK_KEY_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    key_ttl: std::time::Duration,
}

#[derive(Args)]
struct DatabaseArgs {
    /// postgres://user@host/db (created if missing) or sqlite://path/to/file.db.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    database_url: String,
}

/// The command line as [`Parser::parse`] reads it, but with no environment
/// variable's value in any help: clap shows each one's current value there,
/// and `DATABASE_URL`'s holds its password. Hidden on every setting, not only
/// on `DATABASE_URL`: then no secret setting added later can leak (the
/// variables' names are still listed).
fn parse_command_line() -> Cli {
    fn hide_env_values(command: clap::Command) -> clap::Command {
        command
            .mut_args(|arg| arg.hide_env_values(true))
            .mut_subcommands(hide_env_values)
    }
    let mut command = hide_env_values(Cli::command());
    let matches = command.get_matches_mut();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit())
}

fn main() -> ExitCode {
    let cli = parse_command_line();
    charges::telemetry::init_logging();
    let result = match cli.command {
        Some(Command::Migrate(args)) => migrate(&args.database_url),
        Some(Command::PurgeExpired(args)) => purge(&args.database.database_url, args.purge_batch),
        Some(Command::Serve(settings)) => serve(*settings),
        Some(Command::Demo(settings)) => demo(*settings),
        Some(Command::Account(command)) => account(command),
        Some(Command::Sandbox(args)) => sandbox(&args.database_url),
        Some(Command::Network(args)) => network(args),
        Some(Command::Conformance(args)) => return charges::conformance::main(*args),
        None => demo(cli.demo),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("charges: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `charges sandbox`: as `POST /demo/sandboxes`, for the operator (no room
/// cap, no per-address limit), on the database a demo server uses.
fn sandbox(url: &str) -> Result<(), String> {
    let mut conn = Connection::open(url).map_err(|e| e.to_string())?;
    conn.store().migrate()?;
    let (id, key) = charges::demo::sandboxes::create_for_operator(conn.store())?;
    println!(
        "created sandbox account {id}; deleted with its rows after DEMO_SANDBOX_IDLE_EXPIRY (2h by default) unused. Its API key, shown this once only:"
    );
    println!("{key}");
    Ok(())
}

/// `charges demo`: `serve` with demo mode on unless DEMO says otherwise,
/// refused on an address other machines reach (DEMO=true is the operator's
/// say-so for that, with `serve`).
fn demo(mut settings: Settings) -> Result<(), String> {
    // Hosted for others on purpose (sandboxes only, PostgreSQL, no crash
    // faults: checked when the demo opens): any address will do.
    if settings.demo_public && !settings.no_demo {
        settings.demo = Some(true);
    }
    if settings.demo.is_none() && !settings.no_demo {
        use std::net::ToSocketAddrs;
        let loopback = settings
            .bind
            .to_socket_addrs()
            .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?
            .all(|a| a.ip().is_loopback());
        if !loopback {
            return Err(format!(
                "`charges demo` (the default command) serves the teaching page on loopback only, and BIND {} is reachable from other machines. Run `charges serve` to serve the API there (demo mode off), or `charges demo --public` to host the teaching page for others (a sandbox per visitor, PostgreSQL).",
                settings.bind
            ));
        }
        settings.demo = Some(true);
    }
    serve(settings)
}

fn serve(settings: Settings) -> Result<(), String> {
    actix_web::rt::System::new().block_on(async move {
        let database = redact(&settings.database_url);
        let app = Application::build(settings).map_err(|e| e.to_string())?;
        let demo = if app.demo() {
            "on: the teaching page, /demo/* and the Demo-* headers, each visitor in a sandbox of their own"
        } else {
            "off (`charges demo` serves the teaching page)"
        };
        // A closed stdout must not stop the server: ignore write errors.
        // Which shape a charge takes: the article's one transaction, or
        // three phases around the network's call.
        let network = match (app.network_url(), app.demo()) {
            (Some(url), _) => format!(
                "{}: every charge asks it first, in three phases (key, call, charge)",
                redact(url)
            ),
            (None, false) => "off: a charge is one transaction (key, charge, stored response)".to_owned(),
            (None, true) => "off: a charge is one transaction (key, charge, stored response); the demo's own network answers only requests with Demo-Network: on (lesson 7)".to_owned(),
        };
        let metrics = app
            .metrics_url()
            .map_or_else(|| "off".to_owned(), |url| format!("{url}/metrics"));
        let _ = writeln!(
            std::io::stdout(),
            "charges is ready: open {}/\n  database: {database} ({})\n  demo mode: {demo}\n  card network: {network}\n  metrics: {metrics}",
            app.url(),
            app.pool().backend().as_str()
        );
        app.run_until_stopped().await.map_err(|e| e.to_string())
    })
}

fn network(args: NetworkArgs) -> Result<(), String> {
    actix_web::rt::System::new().block_on(async move {
        let listener = std::net::TcpListener::bind(&args.bind)
            .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // The default key is public (it is in this source): anyone who can
        // reach the network could authorize in the API's name.
        if !local.ip().is_loopback() && args.api_key == DEFAULT_NETWORK_API_KEY {
            return Err(format!(
                "NETWORK_API_KEY is the default, public key, and NETWORK_BIND {} is reachable from other machines: set NETWORK_API_KEY to a secret of your own (the same for the API), e.g. `openssl rand -hex 32`",
                args.bind
            ));
        }
        let mut api = charges::config::Settings::with_database_url(&args.database_url);
        api.network_latency = args.latency;
        api.idempotency_ttl = args.key_ttl;
        let settings = charges::network::simulator::settings(&api, args.database_url.clone(), &args.api_key);
        let started = charges::network::simulator::start(settings, listener)?;
        let _ = writeln!(
            std::io::stdout(),
            "charges network is ready on {}\n  database: {}",
            started.url,
            redact(&args.database_url)
        );
        started.server.await.map_err(|e| e.to_string())
    })
}

fn migrate(url: &str) -> Result<(), String> {
    let mut conn = Connection::open(url).map_err(|e| e.to_string())?;
    let applied = conn.store().migrate()?;
    println!("applied {} migration(s) to {}", applied.len(), redact(url));
    for name in applied {
        println!("  {name}");
    }
    Ok(())
}

fn purge(url: &str, batch: i64) -> Result<(), String> {
    let mut conn = Connection::open(url).map_err(|e| e.to_string())?;
    conn.store().migrate()?;
    let started = std::time::Instant::now();
    // Purging reads no setting of the policy (an expired key is expired in either mode).
    let policy = charges::idempotency::Policy::new(charges::idempotency::Mode::Atomic);
    let purged = policy
        .purge_expired(conn.store(), batch.max(1))
        .map_err(|e| e.to_string())?;
    println!(
        "purged {purged} expired idempotency key(s) in {} ms",
        started.elapsed().as_millis()
    );
    Ok(())
}

fn account(command: AccountCommand) -> Result<(), String> {
    let url = match &command {
        AccountCommand::Create { database, .. }
        | AccountCommand::Revoke { database, .. }
        | AccountCommand::List { database } => database.database_url.clone(),
    };
    let mut conn = Connection::open(&url).map_err(|e| e.to_string())?;
    conn.store().migrate()?;
    match command {
        AccountCommand::Create { name, .. } => {
            let (id, key) =
                accounts::create_account(conn.store(), &name).map_err(|e| e.to_string())?;
            println!("created account {name:?} (id {id}). Its API key, shown this once only:");
            println!("{key}");
        }
        AccountCommand::Revoke { name, .. } => {
            let id = accounts::revoke_account(conn.store(), &name).map_err(|e| e.to_string())?;
            println!(
                "revoked account {name:?} (id {id}): running servers refuse its key within ACCOUNT_CACHE_TTL"
            );
        }
        AccountCommand::List { .. } => {
            let accounts = accounts::list_accounts(conn.store()).map_err(|e| e.to_string())?;
            println!("{:>6}  {:<28}  {:<28}  name", "id", "created", "revoked");
            for a in accounts {
                let mut name = a.name;
                if a.demo {
                    name.push_str(" (demo mode only)");
                }
                let revoked = a.revoked_at.unwrap_or_else(|| "-".into());
                println!("{:>6}  {:<28}  {:<28}  {name}", a.id, a.created_at, revoked);
            }
        }
    }
    Ok(())
}
