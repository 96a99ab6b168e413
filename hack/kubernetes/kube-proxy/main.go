// Command kube-proxy builds the upstream Service proxy from the
// k8s.io/kubernetes module pinned in ../go.mod, for hack/cluster.sh
// (ClusterIP Services on the node, iptables mode).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
