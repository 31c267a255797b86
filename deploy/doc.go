// Package deploy holds actloop's deployment files and the tests that check
// them against the services: helm_test.go renders the Helm chart in
// helm/actloop for its default values and each helm/actloop/ci/*.yaml and
// checks the manifests.
//
// It is a module of its own so that the Helm and Kubernetes libraries stay
// out of actloop's main module.
package deploy
