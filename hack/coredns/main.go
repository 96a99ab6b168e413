// Command coredns is CoreDNS with only the plugins hack/cluster.sh uses
// (cluster DNS for the local node: the kubernetes plugin answers
// cluster.local, everything else gets NXDOMAIN from template; nothing is
// forwarded off the machine). Upstream's plugin.cfg pulls in every cloud
// SDK, so the plugin list is set here instead, in the order of upstream's
// directives.
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
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	dnsserver.Directives = []string{
		"bind", "ready", "health", "errors", "log", "cache", "template", "kubernetes",
	}
}

func main() {
	coremain.Run()
}
