// Package sandboxtest is the conformance suite for sandbox.Backend
// implementations: behaviour every backend shares (exec, timeouts, exit
// codes, output cap, diff, attach by handle, close (twice, after the
// sandbox's process died), id validation, setup failure, concurrency).
// A backend's tests call Run with a constructor for a fresh backend.
//
// The suite uses only commands that sandbox.Sim understands (echo, sleep,
// exit, seq), so it needs no real shell, except for the tests that
// Options.Shell enables (diff and patch on a git workspace).
package sandboxtest
