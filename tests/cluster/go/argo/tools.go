//go:build tools

// Package tools only records which upstream main packages this wrapper module builds
// (the controller's main is ours: ./controller).
package tools

import (
	_ "github.com/argoproj/argo-workflows/v4/cmd/argoexec"
)
