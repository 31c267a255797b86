// Package sandboxtest is the conformance suite for sandbox.Backend
// implementations: behaviour every backend shares (exec, timeouts, exit
// codes, attach by handle, close, id validation, setup failure, concurrency).
// A backend's tests call Run with a constructor for a fresh backend.
//
// The suite uses only commands that sandbox.Sim understands (echo, sleep,
// exit), so it needs no real shell.
package sandboxtest
