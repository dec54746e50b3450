//go:build tools

// Package helm only records the binary this module builds.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
