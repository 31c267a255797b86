// Command genschema writes pkg/schema's JSON Schemas from the Go types
// (package schemagen) into the current directory. Run it with
// go generate ./pkg/schema.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/actloop/actloop/pkg/schema/internal/schemagen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
}

func run() error {
	names := make([]string, 0, len(schemagen.Files))
	for name := range schemagen.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, err := schemagen.Files[name]()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
