//! Capabilities, each declared **once**, in the table at the bottom of this
//! file: its [`Capability`] variant and wire name, the [`Offer`] accessor,
//! and the module that holds its trait and says which actions it serves and
//! how an action calls the trait. Everything else is derived from that
//! table: [`Capability::ALL`], [`Capability::as_str`], [`Capability::of`],
//! the accessors' defaults, [`offer!`](crate::offer) (a provider's list, and
//! what its connector declares), [`capabilities`] (what a session offers) and
//! [`perform`] (the dispatch of an action, with the `unsupported` answer when
//! a session lacks the capability).
//!
//! Adding a capability: the action (and its data) in `bmcfleet_schema`, one
//! module here with the trait, `handles` and `perform`, one line in the
//! table; then each provider that can do it implements the trait in a file
//! of its own and names it in its `impl Offer` (in its `lib.rs`). A session
//! that executes actions natively (the simulator) needs nothing
//! ([`BmcSession::actions`]).

mod bios;
mod bmc_clock;
mod bmc_reset;
mod boot;
mod certificates;
mod console;
mod event_log;
mod firmware_update;
mod identify;
mod inventory;
mod network_source;
mod power;
mod power_capping;
mod raw;
mod secure_boot;
mod sensors;
mod users;
mod virtual_media;

pub use bios::Bios;
pub use bmc_clock::{now_unix_ms, BmcClockControl, SYNC_TOLERANCE_MS};
pub use bmc_reset::BmcReset;
pub use boot::{Applies, BootControl};
pub use certificates::BmcCertificates;
pub use console::{Console, ConsoleSettings};
pub use event_log::{only_the_sel, EventLog, SEL_LOG_ID};
pub use firmware_update::{FirmwareUpdate, Started};
pub use identify::Identify;
pub use inventory::Inventory;
pub use network_source::NetworkSource;
pub use power::Power;
pub use power_capping::PowerCapping;
pub use raw::Raw;
pub use secure_boot::SecureBoot;
pub use sensors::Sensors;
pub use users::Users;
pub use virtual_media::VirtualMedia;

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, ErrorCode};

/// A session that executes [`Action`]s itself rather than through the
/// capability traits (the simulator, which speaks actions on its wire): it
/// offers every capability that serves actions.
#[async_trait]
pub trait ActionExecutor: Send {
    async fn execute(&mut self, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>>;
}

macro_rules! capabilities {
    ($d:tt $( $(#[$doc:meta])* $variant:ident = $name:literal, $accessor:ident: $module:ident::$trait:ident; )+) => {
        /// A provider's capability list, inside `impl Offer for …`:
        /// `bmcfleet_provider::offer!(power, boot);` implements each named
        /// accessor as `Some(self)` (the session type implements each named
        /// capability's trait) and [`Offer::offered`] as the same list.
        /// `offer!(@accessors power, boot)`: the accessors only, for a
        /// provider whose further accessors are conditional and which lists
        /// `offered` itself.
        #[macro_export]
        macro_rules! offer {
            (@accessors $d($d name:ident),+ $d(,)?) => { $d( $crate::offer!(@ $d name); )+ };
            ($d($d name:ident),+ $d(,)?) => {
                $d( $crate::offer!(@ $d name); )+
                fn offered() -> &'static [$crate::Capability] where Self: Sized {
                    &[$d( $crate::offer!(@cap $d name) ),+]
                }
            };
            $(
                (@ $accessor) => {
                    fn $accessor(&mut self) -> Option<&mut dyn $crate::capability::$trait> {
                        Some(self)
                    }
                };
                (@cap $accessor) => { $crate::Capability::$variant };
            )+
        }

        /// What a BMC can be asked to do.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Capability {
            $( $(#[$doc])* $variant, )+
        }

        impl Capability {
            /// Every capability, in declaration order.
            pub const ALL: &'static [Capability] = &[$( Capability::$variant, )+];

            /// The wire name (`power`, `boot_device`, ...).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Capability::$variant => $name, )+
                }
            }

            /// The capability an action needs.
            pub fn of(action: &Action) -> Capability {
                $( if $module::handles(action) { return Capability::$variant; } )+
                unreachable!("no capability serves {}: declare it in provider/src/capability", action.kind())
            }
        }

        /// What a session can do: one accessor per capability, `None` (not
        /// implemented) by default; a provider returns `Some(self)` for what
        /// it implements, in one `impl Offer` next to its module list
        /// (`lib.rs`), mostly through [`offer!`](crate::offer).
        pub trait Offer {
            $(
                fn $accessor(&mut self) -> Option<&mut dyn $trait> {
                    None
                }
            )+

            /// The most a session of this type offers (what a connector
            /// declares before any session is open).
            fn offered() -> &'static [Capability]
            where
                Self: Sized,
            {
                &[]
            }
        }

        /// An open, authenticated conversation with one BMC.
        #[async_trait]
        pub trait BmcSession: Offer + Send {
            /// Provider name reported in results (`ipmi`, `redfish`, `amt`, `sim`).
            fn provider(&self) -> &'static str;

            /// A session that executes actions natively (see [`ActionExecutor`]).
            fn actions(&mut self) -> Option<&mut dyn ActionExecutor> {
                None
            }

            /// Whether the session is still worth reusing (false after a fatal
            /// transport error; the worker then reconnects).
            fn is_healthy(&self) -> bool {
                true
            }

            /// Close the session on the BMC (logout, Close Session). Best effort.
            async fn close(&mut self) {}

            /// IPMI: the RMCP+ cipher suite the session runs (reported with
            /// each action's result). `None` for other protocols.
            fn cipher_suite(&self) -> Option<u8> {
                None
            }
        }

        /// The capabilities a session implements, derived from its accessors.
        pub fn capabilities(session: &mut dyn BmcSession) -> Vec<Capability> {
            if session.actions().is_some() {
                return Capability::ALL.iter().copied().filter(|c| c.serves_actions()).collect();
            }
            let mut caps = Vec::new();
            $( if session.$accessor().is_some() { caps.push(Capability::$variant); } )+
            caps
        }

        /// Run one action on a session; `unsupported` (naming what the
        /// session offers) when it lacks the capability.
        pub async fn perform(session: &mut dyn BmcSession, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
            if let Some(executor) = session.actions() {
                return executor.execute(ctx, action).await;
            }
            $(
                if $module::handles(action) {
                    return match session.$accessor() {
                        Some(cap) => $module::perform(cap, ctx, action).await,
                        None => Err(unsupported(Capability::$variant, session)),
                    };
                }
            )+
            unreachable!("no capability serves {}: declare it in provider/src/capability", action.kind())
        }
    };
}

fn unsupported(cap: Capability, session: &mut dyn BmcSession) -> ProviderError {
    let offers: Vec<&str> = capabilities(session).iter().map(|c| c.as_str()).collect();
    ProviderError::new(
        ErrorCode::Unsupported,
        format!("the {} provider does not implement {cap} (it offers: {})", session.provider(), offers.join(", ")),
    )
}

impl Capability {
    /// Whether actions need this capability (every one but the console,
    /// which is a session of its own): what a session that executes
    /// actions itself (the simulator) offers.
    pub fn serves_actions(self) -> bool {
        self != Capability::Console
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

capabilities! { $
    Power = "power", power: power::Power;
    BootDevice = "boot_device", boot: boot::BootControl;
    Users = "users", users: users::Users;
    BmcReset = "bmc_reset", bmc_reset: bmc_reset::BmcReset;
    NetworkSource = "network_source", network_source: network_source::NetworkSource;
    Raw = "raw", raw: raw::Raw;
    VirtualMedia = "virtual_media", virtual_media: virtual_media::VirtualMedia;
    Inventory = "inventory", inventory: inventory::Inventory;
    EventLog = "event_log", event_log: event_log::EventLog;
    Sensors = "sensors", sensors: sensors::Sensors;
    Bios = "bios", bios: bios::Bios;
    SecureBoot = "secure_boot", secure_boot: secure_boot::SecureBoot;
    FirmwareUpdate = "firmware_update", firmware_update: firmware_update::FirmwareUpdate;
    /// The serial console: serves no action (a session of its own, docs/CONSOLE.md).
    Console = "console", console: console::Console;
    Identify = "identify", identify: identify::Identify;
    PowerCapping = "power_capping", power_capping: power_capping::PowerCapping;
    BmcClock = "bmc_clock", bmc_clock: bmc_clock::BmcClockControl;
    BmcCertificates = "bmc_certificates", bmc_certificates: certificates::BmcCertificates;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::*;

    /// One action of every kind. The `match` has no wildcard: a new action
    /// variant does not compile here until it has an example.
    fn examples() -> Vec<Action> {
        let all = vec![
            Action::Power(PowerOp::On),
            Action::PowerSettle(PowerSettle {
                op: PowerOp::SoftOff,
                settle: None,
                escalate_after: Some(std::time::Duration::from_secs(60)),
            }),
            Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
            Action::GetBootDevice,
            Action::User(UserOp::List),
            Action::BmcReset(BmcResetKind::Cold),
            Action::NetworkSource(NetworkSourceOp::Get),
            Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 6, cmd: 1, data: vec![] })),
            Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Cd }),
            Action::Inventory,
            Action::EventLog(EventLogOp::clear()),
            Action::Sensors,
            Action::BiosGet,
            Action::SecureBootGet,
            Action::FirmwareUpdate(bmcfleet_schema::FirmwareUpdate {
                image_uri: Some("https://repo.example/x.bin".into()),
                ..Default::default()
            }),
            Action::IdentifyGet,
            Action::Identify(IdentifySet { light: IdentifyLight::On, seconds: None }),
            Action::PowerReading,
            Action::BmcClockGet,
            Action::BmcCertGet,
        ];
        for a in &all {
            match a {
                Action::Power(_)
                | Action::PowerSettle(_)
                | Action::BootDevice(_)
                | Action::GetBootDevice
                | Action::User(_)
                | Action::BmcReset(_)
                | Action::NetworkSource(_)
                | Action::Raw(_)
                | Action::VirtualMedia(_)
                | Action::Inventory
                | Action::EventLog(_)
                | Action::Sensors
                | Action::BiosGet
                | Action::BiosSet(_)
                | Action::BiosReset
                | Action::SecureBootGet
                | Action::SecureBootSet(_)
                | Action::SecureBootResetKeys(_)
                | Action::FirmwareUpdate(_)
                | Action::IdentifyGet
                | Action::Identify(_)
                | Action::PowerReading
                | Action::PowerLimitGet
                | Action::PowerLimitSet(_)
                | Action::BmcClockGet
                | Action::BmcClockSync
                | Action::NtpGet
                | Action::NtpSet(_)
                | Action::BmcCertGet
                | Action::BmcCertReplace(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_action_is_served_by_exactly_one_capability() {
        let handled = |a: &Action| {
            [
                power::handles(a),
                boot::handles(a),
                users::handles(a),
                bmc_reset::handles(a),
                network_source::handles(a),
                raw::handles(a),
                virtual_media::handles(a),
                inventory::handles(a),
                event_log::handles(a),
                sensors::handles(a),
                bios::handles(a),
                secure_boot::handles(a),
                firmware_update::handles(a),
                identify::handles(a),
                power_capping::handles(a),
                bmc_clock::handles(a),
                certificates::handles(a),
            ]
            .iter()
            .filter(|h| **h)
            .count()
        };
        for a in examples() {
            assert_eq!(handled(&a), 1, "{}", a.kind());
        }
        let used: std::collections::BTreeSet<Capability> = examples().iter().map(Capability::of).collect();
        let acting: Vec<Capability> = Capability::ALL.iter().copied().filter(|c| c.serves_actions()).collect();
        assert_eq!(used.into_iter().collect::<Vec<_>>(), acting, "every capability but the console serves some action");
        assert!(examples().iter().all(|a| !super::console::handles(a)), "the console serves no action");
    }

    #[test]
    fn names_are_the_wire_names() {
        let names: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "power",
                "boot_device",
                "users",
                "bmc_reset",
                "network_source",
                "raw",
                "virtual_media",
                "inventory",
                "event_log",
                "sensors",
                "bios",
                "secure_boot",
                "firmware_update",
                "console",
                "identify",
                "power_capping",
                "bmc_clock",
                "bmc_certificates"
            ]
        );
    }

    /// A session offering power only.
    struct PowerOnly;

    #[async_trait]
    impl Power for PowerOnly {
        async fn power(&mut self, _ctx: &Ctx, _op: PowerOp) -> Result<Option<PowerState>> {
            Ok(Some(PowerState::On))
        }
    }

    #[async_trait]
    impl BmcSession for PowerOnly {
        fn provider(&self) -> &'static str {
            "test"
        }
    }

    impl Offer for PowerOnly {
        // (`offer!` cannot be used by path inside this crate; providers use it.)
        fn power(&mut self) -> Option<&mut dyn Power> {
            Some(self)
        }
    }

    #[tokio::test]
    async fn dispatch_and_unsupported_are_derived() {
        let mut s = PowerOnly;
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(1));
        assert_eq!(capabilities(&mut s), [Capability::Power]);
        assert_eq!(
            perform(&mut s, &ctx, &Action::Power(PowerOp::Status)).await.unwrap(),
            Some(ActionData::PowerState(PowerState::On))
        );
        let e = perform(&mut s, &ctx, &Action::Inventory).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert_eq!(e.message, "the test provider does not implement inventory (it offers: power)");
    }
}
