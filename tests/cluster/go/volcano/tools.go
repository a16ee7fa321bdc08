//go:build tools

// Package tools only records which main packages this wrapper module builds, so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum.
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
