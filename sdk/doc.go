// Package sdk is the contract between the kvhost host and its WebAssembly
// plugins: the ABI version, the names of every export and import, the JSON
// wire structs that cross the boundary, and the byte sizes of the dtypes a
// plugin may declare.
//
// The ABI itself is written down, language-neutrally, in ABI.md beside this
// file; this package is its Go rendering and must stay in step with it. The
// package uses the standard library only so that both sides can import it:
// the host (host/plugin) and guests built with GOOS=wasip1 (sdk/guest,
// configurators/..., plugins/...).
//
// Invariants:
//   - ABIVersion changes whenever an export, import, status code or wire field
//     changes meaning; the host refuses any other version.
//   - Every decoder here (ParseDescriptor, ParseConfigureInput) validates what
//     it returns: a value that decodes without error is safe to act on.
//   - A Pool's buffers add up exactly to its BytesPerUnit (Pool.Check); the
//     host refuses a configurator whose declarations do not.
package sdk
