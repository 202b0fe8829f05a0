// Command kvselect is the KV-cache-aware worker selector: one binary with the
// subcommands serve (default), bench and mocker.
//
// Only this package reads flags and the environment; every other package
// takes a Config with defaults and a Validate method. main reads top to
// bottom: parse, build configs, construct, start, wait for a signal, stop in
// reverse order.
//
// # Goroutine inventory
//
// Kept here as subsystems land; each entry says what feeds the goroutine,
// what it owns and how it stops. There are none yet: the service is not
// built (see README.md, "Status").
package main
