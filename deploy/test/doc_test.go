// Package deploytest checks deploy/helm/kvhost, the kvhost fleet chart:
// it renders the chart with Helm's own Go SDK (engine and lint, as
// `helm template` and `helm lint` run them), decodes every rendered object
// strictly into its typed API struct (k8s.io/api, sigs.k8s.io/gateway-api,
// and the Gateway API Inference Extension's module for InferencePool), so
// an unknown or misspelled field fails, checks that the objects agree with
// each other (selectors, ports, names, grace periods), and starts kvhost
// with the rendered pod's arguments, environment and volumes to see its
// probes, metrics and keys answer as the chart expects.
//
// It is a module of its own so that the main module's go.mod stays free of
// Helm's and Kubernetes' dependency trees; `make test` and `make check`
// run and vet it (make test-deploy).
package deploytest
