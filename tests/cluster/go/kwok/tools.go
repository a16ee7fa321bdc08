//go:build tools

// Package tools only records which main packages this wrapper module builds.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
