//! The card networks the application starts or calls, and what depends on
//! them: the server's (every charge asks it, NETWORK_URL), the demo's own
//! when the server has none, and the list the recovery task finishes stuck
//! keys through.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::web;

use super::StartupError;
use crate::config::DEFAULT_NETWORK_API_KEY;
use crate::config::Settings;
use crate::demo;
use crate::network::simulator;
use crate::network_client::NetworkClient;
use crate::store::DbPool;

/// What the recovery task needs besides the state: the card networks this
/// instance charges through (the server's, and the demo's own), and the
/// stuck keys of other networks it already said it leaves.
pub(super) struct Recovery {
    pub(super) networks: Vec<Arc<NetworkClient>>,
    pub(super) said: std::sync::Mutex<std::collections::HashSet<(i64, String)>>,
}

/// The card networks, and what depends on them: the server's (every
/// charge asks it), the demo's sandbox (with a network of its own when the
/// server has none), and the recovery task's list of the networks this
/// instance can finish a stuck key through.
pub(super) struct Networks {
    pub(super) network: Option<Arc<NetworkClient>>,
    /// The in-process network's server, if one runs here.
    pub(super) server: Option<Server>,
    pub(super) sandbox: Option<web::Data<demo::Sandbox>>,
    pub(super) recovery: Recovery,
}

impl Networks {
    pub(super) fn start(
        settings: &mut Settings,
        pool: &DbPool,
        demo: bool,
    ) -> Result<Networks, StartupError> {
        let (network, mut server) = start_network(settings)?;
        let network = network.map(|started| Arc::new(started.client(settings)));
        let sandbox = if demo {
            // Without a network of the server's, the demo starts one of its
            // own, which only the demo's requests that ask for it reach.
            let own = match &network {
                Some(_) => None,
                None => {
                    let (started, own_server) = start_in_process(settings)?;
                    server = Some(own_server);
                    Some(Arc::new(started.client(settings)))
                }
            };
            let sandbox = demo::Sandbox::open(pool, settings, network.clone(), own)
                .map_err(StartupError::Demo)?;
            Some(web::Data::new(sandbox))
        } else {
            None
        };
        let networks = network
            .iter()
            .chain(sandbox.as_ref().and_then(|s| s.own_network()))
            .cloned()
            .collect();
        Ok(Networks {
            network,
            server,
            sandbox,
            recovery: Recovery {
                networks,
                said: Default::default(),
            },
        })
    }
}

/// A card network this process calls: where, and whether it runs here.
struct StartedNetwork {
    url: String,
    in_process: bool,
}

impl StartedNetwork {
    /// Our client of it, named as key rows registered with it record.
    fn client(&self, settings: &Settings) -> NetworkClient {
        NetworkClient::new(
            &self.url,
            &settings.network_api_key,
            settings.network_timeout,
        )
        .named(settings.network_identity(self.in_process))
        .keeping_keys_for(settings.idempotency_ttl)
    }
}

/// The server's card network, which every charge asks (NETWORK_URL): none
/// (the default: a charge is one transaction), one of this process's own on
/// a loopback port, or a separate one (never with the public default key:
/// `Settings::check_network_key`, before anything starts).
/// Where, and its server if it runs here.
fn start_network(
    settings: &mut Settings,
) -> Result<(Option<StartedNetwork>, Option<Server>), StartupError> {
    match settings.network_url.as_str() {
        crate::config::NETWORK_OFF => Ok((None, None)),
        crate::config::NETWORK_IN_PROCESS => {
            let (started, server) = start_in_process(settings)?;
            Ok((Some(started), Some(server)))
        }
        url => Ok((
            Some(StartedNetwork {
                url: url.to_owned(),
                in_process: false,
            }),
            None,
        )),
    }
}

/// A card network of this process's own, on a loopback port and the
/// network database beside DATABASE_URL's. Its merchant key, unless the
/// operator set one: the one kept in that database, made by the first
/// instance to start, so that every instance on one database charges.
fn start_in_process(settings: &mut Settings) -> Result<(StartedNetwork, Server), StartupError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| StartupError::Network(e.to_string()))?;
    if settings.network_api_key == DEFAULT_NETWORK_API_KEY {
        settings.network_api_key = simulator::in_process_key(&settings.network_database())
            .map_err(StartupError::Network)?;
    }
    let network_settings = simulator::settings(
        settings,
        settings.network_database(),
        &settings.network_api_key,
    );
    let started = simulator::start(network_settings, listener).map_err(StartupError::Network)?;
    let network = StartedNetwork {
        url: started.url,
        in_process: true,
    };
    Ok((network, started.server))
}
