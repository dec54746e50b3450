//go:build tools

// Package promtool only records the binaries this module builds besides
// its own promql-metrics.
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"
