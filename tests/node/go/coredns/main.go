// CoreDNS with only the plugins the test node's cluster DNS needs: it answers the
// cluster.local zone from the API server (headless Services resolve to pod IPs) and
// forwards nothing, so no pod query ever leaves this machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The directive list decides both which Corefile directives parse and the order in
	// which plugins see a query; keep CoreDNS's own relative order of these plugins.
	if err := dnsserver.SetDirectives([]string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}); err != nil {
		panic(err)
	}
}

func main() {
	coremain.Run()
}
