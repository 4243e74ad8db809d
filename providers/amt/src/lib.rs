//! bmcfleet amt provider (in progress).
