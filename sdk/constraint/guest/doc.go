// Package guest is the Go library for constraint plugins (constraint ABI,
// ../../CONSTRAINT_ABI.md): a plugin implements Engine and calls Register
// from init(); the build-tagged exports (GOOS=wasip1) turn ABI calls into
// Engine calls and manage the I/O region. Grammar is the built-in engine
// (package grammar behind the Engine interface), also used natively by
// the host's tests.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
package guest
