package main

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary stand in for actloop when a test starts
// services as child processes ('actloop serve NAME', as bench-pipeline
// --processes does).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("actloop: " + err.Error() + "\n")
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
