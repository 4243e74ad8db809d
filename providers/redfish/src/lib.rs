//! bmcfleet redfish provider (in progress).
