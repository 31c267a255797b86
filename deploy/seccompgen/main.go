// Command seccompgen writes the env-worker's seccomp profiles
// (deploy.SeccompProfileFiles) where docker-compose.yml and the Helm chart
// read them. Run from the deploy directory: go run ./seccompgen.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/actloop/actloop/deploy"
)

func main() {
	files, err := deploy.SeccompProfileFiles()
	if err != nil {
		log.Fatal(err)
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
