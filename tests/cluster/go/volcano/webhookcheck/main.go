// Command webhookcheck runs Volcano's own job admission webhooks (mutate + validate) in
// process, without a server: one Volcano Job as JSON per input line, one verdict per output
// line. Tests use it to prove rendered jobs pass the webhook's rules and need none of its
// defaults, so clusters with and without the webhook run the same job.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	schedulinglisters "volcano.sh/apis/pkg/client/listers/scheduling/v1beta1"
	"volcano.sh/volcano/cmd/webhook-manager/app/options"
	_ "volcano.sh/volcano/pkg/webhooks/admission/jobs/mutate"
	_ "volcano.sh/volcano/pkg/webhooks/admission/jobs/validate"
	"volcano.sh/volcano/pkg/webhooks/router"
)

type verdict struct {
	Allowed bool            `json:"allowed"`
	Message string          `json:"message"`
	Patch   json.RawMessage `json:"patch"`
}

func main() {
	// The queues the webhook may look up: every name given on the command line, all Open.
	queues := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range os.Args[1:] {
		queue := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
		queue.Status.State = schedulingv1beta1.QueueStateOpen
		if err := queues.Add(queue); err != nil {
			fail(err)
		}
	}
	services := map[string]*router.AdmissionService{}
	config := &options.Config{EnabledAdmission: "/jobs/mutate,/jobs/validate", SchedulerNames: []string{"volcano"}}
	err := router.ForEachAdmission(config, func(service *router.AdmissionService) error {
		service.Config.QueueLister = schedulinglisters.NewQueueLister(queues)
		service.Config.SchedulerNames = config.SchedulerNames
		services[service.Path] = service
		return nil
	})
	if err != nil {
		fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		review := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
			UID:       "webhookcheck",
			Operation: admissionv1.Create,
			Resource:  metav1.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"},
			Object:    runtime.RawExtension{Raw: append([]byte(nil), in.Bytes()...)},
		}}
		mutated := services["/jobs/mutate"].Func(review)
		validated := services["/jobs/validate"].Func(review)
		result := verdict{Allowed: validated.Allowed && mutated.Allowed, Patch: json.RawMessage("null")}
		if validated.Result != nil {
			result.Message = validated.Result.Message
		}
		if mutated.Result != nil {
			result.Message += mutated.Result.Message
		}
		if len(mutated.Patch) > 0 {
			result.Patch = mutated.Patch
		}
		if err := out.Encode(result); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "webhookcheck:", err)
	os.Exit(2)
}
