package spec

// Exported forms of the network and capability checks, for the admission
// policy (internal/admission), which bounds the same values.

// NetworkProblem checks a container network name as TaskSpec.network is
// checked ("none", "bridge", "host" or [A-Za-z0-9][A-Za-z0-9._-]*, 1 to 64
// bytes) and returns what is wrong with it, or "" when it is fine. An
// empty name is fine (it means the default).
func NetworkProblem(s string) string { return networkProblem(s) }

// CapabilityProblem checks a Linux capability name, with or without
// "CAP_", as TaskSpec.capabilities is checked, and returns what is wrong
// with it, or "" when it is fine.
func CapabilityProblem(c string) string { return capabilityProblem(c) }

// CanonicalCapability returns a capability's canonical name, without any
// leading "CAP_", as Normalize stores it.
func CanonicalCapability(c string) string { return canonicalCapability(c) }
