//! The `telemetry:` section of `glovebox.yaml`: where the services send OpenTelemetry traces and
//! metrics (OTLP over gRPC, or over HTTP with protobuf bodies), the `service.namespace` they
//! report, and the share of calls traced. Off unless an endpoint is set. The standard `OTEL_*`
//! variables override the file (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
//! `OTEL_TRACES_SAMPLER_ARG`, `service.namespace` in `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_SDK_DISABLED=true`); `glovebox up` hands the result to every service it starts as those
//! same variables ([`Telemetry::to_env`]), so each service reads only its environment.

use crate::Invalid;
use serde::{Deserialize, Serialize};

/// The section as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// The collector's address, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `https://collector.example:4318` (HTTP); absent: telemetry off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `grpc` (default) or `http/protobuf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_namespace: Option<String>,
    /// The share of calls traced, 0.0 to 1.0 (default 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
}

impl RawTelemetry {
    /// Whether nothing is set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        *self == RawTelemetry::default()
    }
}

/// The validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Where to export; `None`: telemetry is off (nothing exported, no OpenTelemetry layer).
    /// Over HTTP this is the base address: traces go to `/v1/traces`, metrics to `/v1/metrics`.
    pub otlp_endpoint: Option<String>,
    /// How the exporters talk to the collector.
    pub protocol: Protocol,
    /// `service.namespace` of every service (default `glovebox`).
    pub service_namespace: String,
    /// The share of traces sampled at their root (the broker); the other services follow the
    /// root's decision.
    pub sample_ratio: f64,
}

impl Default for Telemetry {
    fn default() -> Telemetry {
        Telemetry {
            otlp_endpoint: None,
            protocol: Protocol::Grpc,
            service_namespace: DEFAULT_NAMESPACE.to_owned(),
            sample_ratio: 1.0,
        }
    }
}

/// The OTLP transports glovebox exports over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (plain text: a local collector).
    Grpc,
    /// OTLP/HTTP with protobuf bodies; `https://` endpoints are verified against the system's
    /// roots.
    HttpProtobuf,
}

impl Protocol {
    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` and `telemetry.otlp_protocol` use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }

    fn parse(name: &str, source: &str) -> Result<Protocol, Invalid> {
        match name.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => Err(crate::invalid::invalid!(
                "{source}: http/json is not supported; use http/protobuf or grpc"
            )),
            other => Err(crate::invalid::invalid!(
                "{source}: expected grpc or http/protobuf, got {other:?}"
            )),
        }
    }
}

/// The namespace when none is configured.
pub const DEFAULT_NAMESPACE: &str = "glovebox";
/// The longest endpoint URL accepted.
pub const MAX_ENDPOINT_BYTES: usize = 2048;
/// The longest namespace accepted.
pub const MAX_NAMESPACE_BYTES: usize = 64;

pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub const ENV_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub const ENV_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub const ENV_RESOURCE: &str = "OTEL_RESOURCE_ATTRIBUTES";
pub const ENV_DISABLED: &str = "OTEL_SDK_DISABLED";
/// Every variable [`Telemetry::validate`] reads (what `main` passes in).
pub const ENV_NAMES: &[&str] = &[
    ENV_ENDPOINT,
    ENV_PROTOCOL,
    ENV_SAMPLER_ARG,
    ENV_RESOURCE,
    ENV_DISABLED,
];

impl Telemetry {
    /// Whether traces and metrics are exported.
    pub fn is_on(&self) -> bool {
        self.otlp_endpoint.is_some()
    }

    /// Validates `raw`, each field overridden by its standard variable when `env` has it. The
    /// message names the field (or the variable) and what was expected.
    pub fn validate(
        raw: &RawTelemetry,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Telemetry, Invalid> {
        let disabled = match env(ENV_DISABLED).as_deref().map(str::trim) {
            None | Some("") | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(crate::invalid::invalid!(
                    "{ENV_DISABLED}: expected true or false, got {other:?}"
                ));
            }
        };
        let (endpoint, source) = match env(ENV_ENDPOINT).filter(|v| !v.trim().is_empty()) {
            Some(v) => (Some(v), ENV_ENDPOINT),
            None => (raw.otlp_endpoint.clone(), "telemetry.otlp_endpoint"),
        };
        let protocol = match env(ENV_PROTOCOL).filter(|v| !v.trim().is_empty()) {
            Some(v) => Protocol::parse(&v, ENV_PROTOCOL)?,
            None => match raw.otlp_protocol.as_deref() {
                Some(v) => Protocol::parse(v, "telemetry.otlp_protocol")?,
                None => Protocol::Grpc,
            },
        };
        let otlp_endpoint = match endpoint {
            Some(e) if !disabled => Some(check_endpoint(e.trim(), source, protocol)?),
            _ => None,
        };
        let namespace = match env(ENV_RESOURCE).and_then(|v| resource_namespace(&v)) {
            Some(ns) => (ns, ENV_RESOURCE),
            None => (
                raw.service_namespace
                    .clone()
                    .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
                "telemetry.service_namespace",
            ),
        };
        let service_namespace = check_namespace(namespace.0, namespace.1)?;
        let sample_ratio = match env(ENV_SAMPLER_ARG) {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(r) => check_ratio(r, ENV_SAMPLER_ARG)?,
                Err(_) => {
                    return Err(crate::invalid::invalid!(
                        "{ENV_SAMPLER_ARG}: expected a number from 0 to 1, got {v:?}"
                    ));
                }
            },
            None => check_ratio(raw.sample_ratio.unwrap_or(1.0), "telemetry.sample_ratio")?,
        };
        Ok(Telemetry {
            otlp_endpoint,
            protocol,
            service_namespace,
            sample_ratio,
        })
    }

    /// The standard variables that say the same, for a child process: what `glovebox up` sets
    /// for each service, overriding whatever it inherited.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (ENV_DISABLED.to_owned(), (!self.is_on()).to_string()),
            (
                ENV_RESOURCE.to_owned(),
                format!("service.namespace={}", self.service_namespace),
            ),
            (
                ENV_SAMPLER.to_owned(),
                "parentbased_traceidratio".to_owned(),
            ),
            (ENV_SAMPLER_ARG.to_owned(), self.sample_ratio.to_string()),
        ];
        env.push((
            ENV_ENDPOINT.to_owned(),
            self.otlp_endpoint.clone().unwrap_or_default(),
        ));
        env.push((ENV_PROTOCOL.to_owned(), self.protocol.name().to_owned()));
        env
    }
}

fn check_endpoint(e: &str, source: &str, protocol: Protocol) -> Result<String, Invalid> {
    if e.len() > MAX_ENDPOINT_BYTES {
        return Err(crate::invalid::invalid!(
            "{source}: longer than {MAX_ENDPOINT_BYTES} bytes"
        ));
    }
    let example = match protocol {
        Protocol::Grpc => "an OTLP/gRPC address like http://127.0.0.1:4317",
        Protocol::HttpProtobuf => "an OTLP/HTTP address like https://collector.example:4318",
    };
    if e.starts_with("https://") && protocol == Protocol::Grpc {
        return Err(crate::invalid::invalid!(
            "{source}: https over gRPC is not supported; use otlp_protocol http/protobuf for TLS, or a local collector over http://"
        ));
    }
    if e.contains('?') || e.contains('#') || e.contains('@') {
        return Err(crate::invalid::invalid!(
            "{source}: expected {example} without credentials, query or fragment, got {e:?}"
        ));
    }
    let Some(rest) = e
        .strip_prefix("http://")
        .or_else(|| e.strip_prefix("https://"))
    else {
        return Err(crate::invalid::invalid!(
            "{source}: expected {example}, got {e:?}"
        ));
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty()
        || !authority
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]_".contains(c))
    {
        return Err(crate::invalid::invalid!(
            "{source}: expected {example}, got {e:?}"
        ));
    }
    Ok(e.trim_end_matches('/').to_owned())
}

fn check_namespace(ns: String, source: &str) -> Result<String, Invalid> {
    if ns.is_empty()
        || ns.len() > MAX_NAMESPACE_BYTES
        || !ns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(crate::invalid::invalid!(
            "{source}: expected 1 to {MAX_NAMESPACE_BYTES} letters, digits, '.', '_' or '-', got {ns:?}"
        ));
    }
    Ok(ns)
}

fn check_ratio(r: f64, source: &str) -> Result<f64, Invalid> {
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(crate::invalid::invalid!(
            "{source}: expected a number from 0 to 1, got {r}"
        ))
    }
}

/// `service.namespace` from `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`), if present.
fn resource_namespace(attributes: &str) -> Option<String> {
    attributes.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == "service.namespace").then(|| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn off_by_default() {
        let t = Telemetry::validate(&RawTelemetry::default(), no_env).unwrap();
        assert_eq!(t, Telemetry::default());
        assert!(!t.is_on());
    }

    #[test]
    fn file_values_and_environment_overrides() {
        let raw = RawTelemetry {
            otlp_endpoint: Some("http://127.0.0.1:4317".into()),
            service_namespace: Some("desktops".into()),
            sample_ratio: Some(0.25),
            ..Default::default()
        };
        let file = Telemetry::validate(&raw, no_env).unwrap();
        assert_eq!(
            file,
            Telemetry {
                otlp_endpoint: Some("http://127.0.0.1:4317".into()),
                protocol: Protocol::Grpc,
                service_namespace: "desktops".into(),
                sample_ratio: 0.25
            }
        );
        let env = env_of(&[
            (ENV_ENDPOINT, "http://[::1]:14317"),
            (ENV_RESOURCE, "team=x,service.namespace=lab"),
            (ENV_SAMPLER_ARG, "0.5"),
        ]);
        let both = Telemetry::validate(&raw, env).unwrap();
        assert_eq!(both.otlp_endpoint.as_deref(), Some("http://[::1]:14317"));
        assert_eq!(both.service_namespace, "lab");
        assert_eq!(both.sample_ratio, 0.5);
        let tls = Telemetry::validate(
            &raw,
            env_of(&[
                (ENV_ENDPOINT, "https://collector.example:4318/"),
                (ENV_PROTOCOL, "http/protobuf"),
            ]),
        )
        .unwrap();
        assert_eq!(tls.protocol, Protocol::HttpProtobuf);
        assert_eq!(
            tls.otlp_endpoint.as_deref(),
            Some("https://collector.example:4318")
        );
        let off = Telemetry::validate(&raw, env_of(&[(ENV_DISABLED, "true")])).unwrap();
        assert!(!off.is_on());
    }

    #[test]
    fn to_env_round_trips() {
        for t in [
            Telemetry::default(),
            Telemetry {
                otlp_endpoint: Some("http://collector:4317".into()),
                protocol: Protocol::Grpc,
                service_namespace: "fleet-a".into(),
                sample_ratio: 0.1,
            },
            Telemetry {
                otlp_endpoint: Some("https://collector.example:4318".into()),
                protocol: Protocol::HttpProtobuf,
                service_namespace: "fleet-b".into(),
                sample_ratio: 1.0,
            },
        ] {
            let vars = t.to_env();
            let env = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            // What a child reads with a file that says something else entirely.
            let raw = RawTelemetry {
                otlp_endpoint: Some("http://elsewhere:1".into()),
                otlp_protocol: Some("http/protobuf".into()),
                service_namespace: Some("other".into()),
                sample_ratio: Some(0.9),
            };
            assert_eq!(Telemetry::validate(&raw, env).unwrap(), t);
        }
    }

    #[test]
    fn refusals_name_the_field() {
        type Case<'a> = (RawTelemetry, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (
                RawTelemetry {
                    otlp_endpoint: Some("https://c:4317".into()),
                    ..Default::default()
                },
                &[],
                "telemetry.otlp_endpoint: https over gRPC is not supported",
            ),
            (
                RawTelemetry {
                    otlp_endpoint: Some("https://user:pw@c:4318".into()),
                    otlp_protocol: Some("http/protobuf".into()),
                    ..Default::default()
                },
                &[],
                "telemetry.otlp_endpoint: expected an OTLP/HTTP address",
            ),
            (
                RawTelemetry {
                    otlp_endpoint: Some("http://c:4318".into()),
                    otlp_protocol: Some("http/json".into()),
                    ..Default::default()
                },
                &[],
                "telemetry.otlp_protocol: http/json is not supported",
            ),
            (
                RawTelemetry::default(),
                &[(ENV_PROTOCOL, "carrier-pigeon")],
                "OTEL_EXPORTER_OTLP_PROTOCOL: expected grpc or http/protobuf",
            ),
            (
                RawTelemetry {
                    otlp_endpoint: Some("c:4317".into()),
                    ..Default::default()
                },
                &[],
                "telemetry.otlp_endpoint: expected",
            ),
            (
                RawTelemetry::default(),
                &[(ENV_ENDPOINT, "http://a b")],
                "OTEL_EXPORTER_OTLP_ENDPOINT: expected",
            ),
            (
                RawTelemetry {
                    sample_ratio: Some(1.5),
                    ..Default::default()
                },
                &[],
                "telemetry.sample_ratio: expected a number from 0 to 1",
            ),
            (
                RawTelemetry::default(),
                &[(ENV_SAMPLER_ARG, "lots")],
                "OTEL_TRACES_SAMPLER_ARG: expected",
            ),
            (
                RawTelemetry {
                    service_namespace: Some("a b".into()),
                    ..Default::default()
                },
                &[],
                "telemetry.service_namespace: expected",
            ),
            (
                RawTelemetry::default(),
                &[(ENV_DISABLED, "perhaps")],
                "OTEL_SDK_DISABLED: expected true or false",
            ),
        ];
        for (raw, env, want) in cases {
            let err = Telemetry::validate(raw, env_of(env)).unwrap_err();
            assert!(err.0.starts_with(want), "{err} should start with {want}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_yaml::from_str::<RawTelemetry>("otlp_endpoint: http://a:1\nendpoint: x\n")
            .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
