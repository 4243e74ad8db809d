//! Fault envelopes, return values and broken answers become typed errors
//! carrying AMT's own words.

use crate::common::{ctx, session, session_replaying};
use crate::fixture_server;
use bmcfleet_provider::{BmcSession, BootControl, Power};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode, PowerOp};
use bmcfleet_testing::amt::{Class, FaultNs, Injection, Op};

const PXE: BootDeviceRequest = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false };

#[tokio::test]
async fn captured_destination_unreachable() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::Get(Class::BootCapabilities), Injection::DestinationUnreachable);
    let e = s.set_boot_device(&ctx(), &PXE).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unreachable);
    assert!(!e.retryable, "AMT answers the same to the same request");
    assert!(e.message.contains("wsa:DestinationUnreachable"), "{}", e.message);
    assert!(
        e.message.contains("No route can be determined to reach the destination role defined by the WSAddressing To."),
        "AMT's own text: {}",
        e.message
    );
    assert!(s.is_healthy(), "a fault is an answer: the session stays usable");
}

#[tokio::test]
async fn captured_chunked_already_exists_fault() {
    let server = fixture_server!();
    let mut s =
        session_replaying(&server, Op::Put(Class::BootSettingData), "http/amt15-400-chunked-fault-AlreadyExists.http")
            .await;
    let e = s.set_boot_device(&ctx(), &PXE).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(e.message.contains("wsman:AlreadyExists"), "{}", e.message);
    assert!(e.message.contains("The sender attempted to create a resource which already exists."), "{}", e.message);
    // The transcript closed the connection; the next call reconnects.
    s.set_boot_device(&ctx(), &PXE).await.unwrap();
}

#[tokio::test]
async fn spec_faults_map_to_codes() {
    let cases = [
        (FaultNs::WsMan, "AccessDenied", ErrorCode::PermissionDenied, false),
        (FaultNs::WsMan, "TimedOut", ErrorCode::Timeout, true),
        (FaultNs::WsMan, "Concurrency", ErrorCode::BmcError, true),
        (FaultNs::Addressing, "ActionNotSupported", ErrorCode::Unsupported, false),
        (FaultNs::WsMan, "InternalError", ErrorCode::BmcError, false),
    ];
    let server = fixture_server!();
    let mut s = session(&server).await;
    for (namespace, subcode, code, retryable) in cases {
        let reason = format!("Reason for {subcode}.");
        server.inject(
            Op::Pull(Class::AssociatedPowerManagementService),
            Injection::Fault { namespace, subcode: subcode.into(), reason: reason.clone() },
        );
        let e = Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap_err();
        assert_eq!((e.code, e.retryable), (code, retryable), "{subcode}: {}", e.message);
        assert!(e.message.contains(&reason) && e.message.contains(subcode), "{}", e.message);
    }
}

#[tokio::test]
async fn malformed_and_non_soap_answers_are_protocol_errors() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    for inj in [Injection::MalformedXml, Injection::NotSoap] {
        server.inject(Op::Pull(Class::AssociatedPowerManagementService), inj.clone());
        let e = Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::ProtocolError, "{inj:?}: {}", e.message);
        assert!(e.message.contains("Pull CIM_AssociatedPowerManagementService"), "{}", e.message);
    }
    // A wrong-but-well-formed answer: a method response missing ReturnValue.
    server.inject(Op::RequestPowerStateChange, Injection::NotSoap);
    let e = Power::power(&mut s, &ctx(), PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ProtocolError);
}

#[tokio::test]
async fn http_errors_without_soap() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::Get(Class::BootCapabilities), Injection::HttpStatus(503));
    let e = s.set_boot_device(&ctx(), &PXE).await.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::BmcError, true), "{}", e.message);
    assert!(e.message.contains("503"));
    server.inject(Op::Get(Class::BootCapabilities), Injection::HttpStatus(403));
    let e = s.set_boot_device(&ctx(), &PXE).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
}

#[tokio::test]
async fn a_bmc_that_refuses_connections_is_unreachable_and_nothing_was_sent() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    // The BMC goes away: its port refuses new connections (and the kept-alive
    // one is closed), so the power-on request never leaves this machine.
    server.shutdown().await;
    let e = Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unreachable, "{}", e.message);
    assert!(e.retryable && e.not_sent, "a refused connection proves nothing was sent: {e:?}");
    assert!(e.message.contains("cannot connect"), "{}", e.message);
}

#[tokio::test]
async fn a_huge_fault_text_is_clipped_in_the_error() {
    // A hostile AMT answers with a fault whose reason is megabytes long: the
    // error (logged, stored in the batch's status, published) stays short.
    let server = fixture_server!();
    let mut s = session(&server).await;
    let reason = "A".repeat(2 * 1024 * 1024);
    server.inject(
        Op::Pull(Class::AssociatedPowerManagementService),
        Injection::Fault { namespace: FaultNs::WsMan, subcode: "InternalError".into(), reason },
    );
    let e = Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(e.message.contains("InternalError"), "{}", &e.message[..e.message.len().min(200)]);
    assert!(e.message.len() <= 2048, "an error message of {} bytes", e.message.len());
}

#[tokio::test]
async fn an_enumeration_that_keeps_sending_pages_stops_at_a_byte_budget() {
    // A hostile AMT answers every Pull with a page of thousands of instances
    // and a context to pull again: the worker neither pulls its 64 rounds
    // nor keeps all those pages (gigabytes of parsed XML) in memory.
    let server = fixture_server!();
    let mut s = session(&server).await;
    let class = Class::AssociatedPowerManagementService;
    for _ in 0..64 {
        server.inject(Op::Pull(class), Injection::PullPage { items: 20_000 });
    }
    let e = Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap_err();
    let pulls = server.ops().into_iter().filter(|o| *o == Op::Pull(class)).count();
    assert_eq!(e.code, ErrorCode::ProtocolError, "{}", e.message);
    assert!(pulls <= 4, "{pulls} pages pulled: {}", e.message);
}
