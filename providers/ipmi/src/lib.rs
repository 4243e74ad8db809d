//! bmcfleet ipmi provider (in progress).
