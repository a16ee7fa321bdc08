// workflow-controller for the tests: Argo Workflows' own controller (package
// workflow/controller of github.com/argoproj/argo-workflows/v4) started the way upstream's
// cmd/workflow-controller starts it with LEADER_ELECTION_DISABLE=true, with one difference:
// the health check listens where -health-address says. Upstream v4.0.5 serves /healthz on
// ":6060" (every interface, a fixed port) with no setting to change it; the test controller
// must listen on loopback only, and two test sessions on one machine must not clash.
// Metrics stay off through the ConfigMap (metricsConfig.enabled: false): RunPrometheusServer
// then returns without listening.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	// Cron schedules with a timezone, whatever the host has (as upstream's main does).
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	argo "github.com/argoproj/argo-workflows/v4"
	wfclientset "github.com/argoproj/argo-workflows/v4/pkg/client/clientset/versioned"
	cmdutil "github.com/argoproj/argo-workflows/v4/util/cmd"
	"github.com/argoproj/argo-workflows/v4/util/logs"
	"github.com/argoproj/argo-workflows/v4/workflow/controller"
	"github.com/argoproj/argo-workflows/v4/workflow/metrics"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	namespace := flag.String("namespace", "argo", "namespace of the controller's ConfigMap")
	configMap := flag.String("configmap", "workflow-controller-configmap", "name of the controller's ConfigMap")
	executorImage := flag.String("executor-image", "", "argoexec image (overrides the ConfigMap)")
	pullPolicy := flag.String("executor-image-pull-policy", "", "argoexec imagePullPolicy (overrides the ConfigMap)")
	healthAddress := flag.String("health-address", "127.0.0.1:0", "where /healthz listens")
	logLevel := flag.String("loglevel", "info", "debug|info|warn|error")
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "workflow-controller: -kubeconfig is required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *namespace, *configMap, *executorImage, *pullPolicy, *healthAddress, *logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "workflow-controller: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, configMap, executorImage, pullPolicy, healthAddress, logLevel string) error {
	ctx, log, err := cmdutil.CmdContextWithLogger(&cobra.Command{}, logLevel, "text")
	if err != nil {
		return err
	}
	// As upstream's main (--gloglevel 0): klog's -v flag, which the controller also passes
	// on to argoexec in every step pod (an unset one makes argoexec refuse "--gloglevel ''").
	cmdutil.SetGLogLevel(0)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// The same user agent, rate limits and transport wrappers as upstream's main.
	config = restclient.AddUserAgent(config, fmt.Sprintf("argo-workflows/%s argo-controller", argo.GetVersion().Version))
	config.Burst = 30
	config.QPS = 20.0
	logs.AddK8SLogTransportWrapper(ctx, config)
	metrics.AddMetricsTransportWrapper(ctx, config)

	kube := kubernetes.NewForConfigOrDie(config)
	wf := wfclientset.NewForConfigOrDie(config)
	wfc, err := controller.NewWorkflowController(ctx, config, kube, wf, namespace, "", executorImage, pullPolicy,
		"text", configMap, false)
	if err != nil {
		return err
	}
	log.Info(ctx, "Leader election is turned off. Running in single-instance mode")
	// Upstream's worker counts (--workflow-workers 32 and so on).
	go wfc.Run(ctx, 32, 4, 4, 8, 8)
	go wfc.RunPrometheusServer(ctx, false)

	listener, err := net.Listen("tcp", healthAddress)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", controller.LogMiddleware(log, http.HandlerFunc(wfc.Healthz)))
	server := &http.Server{Handler: mux}
	go func() { _ = server.Serve(listener) }()
	log.Info(ctx, fmt.Sprintf("healthz listening on %s", listener.Addr()))

	<-ctx.Done()
	return server.Shutdown(context.Background())
}
