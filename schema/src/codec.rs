//! MessagePack is the default encoding; JSON when the message says
//! `Content-Type: application/json`.

use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Encoding {
    #[default]
    MessagePack,
    Json,
}

pub const JSON: &str = "application/json";
pub const MSGPACK: &str = "application/msgpack";

/// Deepest nesting of arrays and maps a MessagePack message may have: room
/// for a JSON value of serde_json's 128 levels (a raw body, a BMC's answer)
/// inside a job, event or status record, and far from the 1,000 levels
/// that overflow a 2 MiB thread stack (rmp-serde's own limit is 1,024).
pub const MAX_DEPTH: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("unsupported Content-Type `{0}` (use application/json or application/msgpack)")]
    ContentType(String),
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid MessagePack: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("cannot encode MessagePack: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

impl Encoding {
    /// The encoding a Content-Type header asks for (`None` → MessagePack).
    pub fn from_content_type(ct: Option<&str>) -> Result<Self, CodecError> {
        match ct.map(|c| c.split(';').next().unwrap_or("").trim().to_ascii_lowercase()) {
            None => Ok(Encoding::MessagePack),
            Some(c) if c.is_empty() || c == MSGPACK || c == "application/x-msgpack" => Ok(Encoding::MessagePack),
            Some(c) if c == JSON => Ok(Encoding::Json),
            Some(c) => Err(CodecError::ContentType(c)),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::MessagePack => MSGPACK,
            Encoding::Json => JSON,
        }
    }

    pub fn encode<T: Serialize>(self, value: &T) -> Result<Vec<u8>, CodecError> {
        Ok(match self {
            // Named (map) encoding: self-describing, field names survive,
            // so deny_unknown_fields works the same as for JSON.
            Encoding::MessagePack => rmp_serde::to_vec_named(value)?,
            Encoding::Json => serde_json::to_vec(value)?,
        })
    }

    /// Decode `bytes`. MessagePack nested deeper than [`MAX_DEPTH`] is
    /// refused (JSON stops at serde_json's 128), so no message can exhaust
    /// the decoding thread's stack.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, CodecError> {
        Ok(match self {
            Encoding::MessagePack => {
                let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
                de.set_max_depth(MAX_DEPTH);
                T::deserialize(&mut de)?
            }
            Encoding::Json => serde_json::from_slice(bytes)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::*;
    use crate::result::*;
    use crate::{ErrorBody, ErrorCode, Secret};
    use proptest::prelude::*;
    use std::time::Duration;

    fn sample() -> Batch {
        Batch {
            plan: false,
            events: Default::default(),
            id: Some(ulid::Ulid::from_parts(1_700_000_000_000, 42)),
            machine: None,
            bmc: Some(BmcTarget {
                address: "10.0.0.5:623".parse().unwrap(),
                protocol: Protocol::Ipmi,
                credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("pw") },
                tls: TlsOptions { insecure: true, ca_pem: None, pin_sha256: None, allow_plain_http: false },
                system_id: None,
                options: Default::default(),
            }),
            actions: vec![
                Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
                Action::Power(PowerOp::On),
                Action::Inventory,
                Action::User(UserOp::Update(UserUpdate {
                    name: "ops".into(),
                    password: Some("x".into()),
                    role: None,
                    enabled: Some(true),
                })),
                Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
                    address: [10, 0, 0, 9].into(),
                    netmask: [255, 255, 255, 0].into(),
                    gateway: None,
                })),
                Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 6, cmd: 1, data: vec![] })),
                Action::Raw(RawRequest::Redfish(RawRedfish {
                    method: HttpMethod::Patch,
                    path: "/redfish/v1/Systems/1".into(),
                    body: Some(serde_json::json!({"a": [1, "b"]})),
                })),
                Action::VirtualMedia(VirtualMediaOp::Insert {
                    url: "http://127.0.0.1/x.iso".into(),
                    media: MediaKind::Cd,
                }),
            ],
            on_error: OnError::Continue,
            deadline: Some(Duration::from_secs(90)),
        }
    }

    #[test]
    fn both_encodings_round_trip() {
        let b = sample();
        for enc in [Encoding::MessagePack, Encoding::Json] {
            let bytes = enc.encode(&b).unwrap();
            assert_eq!(enc.decode::<Batch>(&bytes).unwrap(), b, "{enc:?}");
        }
    }

    #[test]
    fn sealed_credentials_wire_shape() {
        let j = r#"{"sealed":{"username":"admin","key":"XKEY","sender":"XSENDER","sealed":"eGt2MQ=="}}"#;
        let c: Credentials = Encoding::Json.decode(j.as_bytes()).unwrap();
        let Credentials::Sealed(s) = &c else { panic!("{c:?}") };
        assert_eq!(
            (s.username.as_str(), s.key.as_str(), s.sender.as_str(), s.sealed.as_str()),
            ("admin", "XKEY", "XSENDER", "eGt2MQ==")
        );
        for enc in [Encoding::MessagePack, Encoding::Json] {
            assert_eq!(enc.decode::<Credentials>(&enc.encode(&c).unwrap()).unwrap(), c);
        }
        assert!(Encoding::Json
            .decode::<Credentials>(br#"{"sealed":{"username":"a","key":"X","sender":"X","sealed":"","extra":1}}"#)
            .is_err());
    }

    #[test]
    fn a_batch_names_a_machine() {
        let b: Batch = Encoding::Json.decode(br#"{"machine":"rack12-node3","actions":[{"power":"on"}]}"#).unwrap();
        assert_eq!((b.machine.as_deref(), b.bmc.is_none()), (Some("rack12-node3"), true));
        for enc in [Encoding::MessagePack, Encoding::Json] {
            assert_eq!(enc.decode::<Batch>(&enc.encode(&b).unwrap()).unwrap(), b);
        }
    }

    #[test]
    fn human_json_is_accepted() {
        let j = r#"{"bmc":{"address":"bmc1.example","credentials":{"ref":"rack12"}},
                    "actions":[{"boot_device":{"device":"pxe"}},{"power":"on"},"inventory"],
                    "deadline":"5m"}"#;
        let b: Batch = Encoding::Json.decode(j.as_bytes()).unwrap();
        assert_eq!(b.bmc.unwrap().protocol, Protocol::Auto);
        assert_eq!(b.actions.len(), 3);
        assert_eq!(b.deadline, Some(Duration::from_secs(300)));
        assert_eq!(b.on_error, OnError::Stop);
    }

    #[test]
    fn unknown_fields_are_rejected_in_both() {
        let j = r#"{"bmc":{"address":"10.0.0.1","credentials":{"ref":"r"}},"actions":["inventory"],"colour":"red"}"#;
        assert!(Encoding::Json.decode::<Batch>(j.as_bytes()).is_err());
        let v: serde_json::Value = serde_json::from_str(j).unwrap();
        let mp = rmp_serde::to_vec_named(&v).unwrap();
        assert!(Encoding::MessagePack.decode::<Batch>(&mp).is_err());
        let j2 = r#"{"bmc":{"address":"10.0.0.1","credentials":{"ref":"r"}},"actions":[{"boot_device":{"device":"pxe","once":true}}]}"#;
        assert!(Encoding::Json.decode::<Batch>(j2.as_bytes()).is_err());
    }

    #[test]
    fn results_and_events_round_trip() {
        let r = BatchResult {
            id: ulid::Ulid::from_parts(1, 2),
            bmc: "v4-10-0-0-5".into(),
            state: BatchState::Failed,
            results: vec![
                ActionResult::ok(
                    0,
                    "power_status",
                    Some("sim".into()),
                    Some(ActionData::PowerState(PowerState::On)),
                    3,
                ),
                ActionResult::err(1, "power_on", Some("sim".into()), ErrorBody::new(ErrorCode::AuthFailed, "nope"), 4),
            ],
            worker: "w1".into(),
            deliveries: 1,
            admitted_at_ms: 1,
            finished_at_ms: 2,
        };
        let ev = Event { batch: r.id, at_ms: 5, event: EventKind::BatchFinished { result: r.clone() } };
        for enc in [Encoding::MessagePack, Encoding::Json] {
            assert_eq!(enc.decode::<Event>(&enc.encode(&ev).unwrap()).unwrap(), ev);
            let reply = Reply::Result(r.clone());
            assert_eq!(enc.decode::<Reply>(&enc.encode(&reply).unwrap()).unwrap(), reply);
        }
    }

    #[test]
    fn content_type_selection() {
        assert_eq!(Encoding::from_content_type(None).unwrap(), Encoding::MessagePack);
        assert_eq!(Encoding::from_content_type(Some("application/json; charset=utf-8")).unwrap(), Encoding::Json);
        assert!(Encoding::from_content_type(Some("text/xml")).is_err());
    }

    fn arb_action() -> impl Strategy<Value = Action> {
        let power = prop_oneof![
            Just(PowerOp::On),
            Just(PowerOp::Off),
            Just(PowerOp::SoftOff),
            Just(PowerOp::Cycle),
            Just(PowerOp::Reset),
            Just(PowerOp::Status),
            Just(PowerOp::Nmi)
        ];
        let dev = prop_oneof![
            Just(BootDevice::Pxe),
            Just(BootDevice::Disk),
            Just(BootDevice::Cdrom),
            Just(BootDevice::Bios),
            Just(BootDevice::Safe)
        ];
        prop_oneof![
            power.prop_map(Action::Power),
            (dev, any::<bool>(), any::<bool>()).prop_map(|(device, persistent, efi)| Action::BootDevice(
                BootDeviceRequest { device, persistent, efi }
            )),
            Just(Action::Inventory),
            Just(Action::GetBootDevice),
            ("[a-z]{1,16}", "\\PC{0,20}").prop_map(|(n, p)| Action::User(UserOp::Create(UserSpec {
                name: n,
                password: p.into(),
                role: UserRole::Operator,
                enabled: true
            }))),
            "[a-z]{1,16}".prop_map(|n| Action::User(UserOp::Delete { name: n })),
            (any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(netfn, cmd, data)| Action::Raw(RawRequest::Ipmi(RawIpmi { netfn, cmd, data }))),
            prop_oneof![Just(BmcResetKind::Warm), Just(BmcResetKind::Cold)].prop_map(Action::BmcReset),
            any::<([u8; 4], [u8; 4])>().prop_map(|(a, m)| Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
                address: a.into(),
                netmask: m.into(),
                gateway: Some(a.into())
            }))),
        ]
    }

    proptest! {
        #[test]
        fn batch_round_trips(actions in proptest::collection::vec(arb_action(), 1..10),
                             user in "\\PC{0,30}", pw in "\\PC{0,30}", secs in 1u64..100_000,
                             cont in any::<bool>()) {
            let b = Batch { plan: false, events: Default::default(),
                id: None,
                machine: None,
                bmc: Some(BmcTarget {
                    address: "10.1.2.3".parse().unwrap(),
                    protocol: Protocol::Redfish,
                    credentials: Credentials::Inline { username: user, password: pw.into() },
                    tls: TlsOptions::default(),
                    system_id: Some("1".into()),
                    options: Default::default(),
                }),
                actions,
                on_error: if cont { OnError::Continue } else { OnError::Stop },
                deadline: Some(Duration::from_secs(secs)),
            };
            for enc in [Encoding::MessagePack, Encoding::Json] {
                let bytes = enc.encode(&b).unwrap();
                prop_assert_eq!(enc.decode::<Batch>(&bytes).unwrap(), b.clone());
            }
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Encoding::MessagePack.decode::<Batch>(&bytes);
            let _ = Encoding::Json.decode::<Batch>(&bytes);
        }
    }
}
