package kubernetes

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// inferencePools is the Gateway API Inference Extension's InferencePool resource, v1 (the
// shape of api/v1/inferencepool_types.go in kubernetes-sigs/gateway-api-inference-extension:
// spec.selector.matchLabels picks the model server pods of the pool's namespace,
// spec.targetPorts, a list of exactly one {number}, is their port).
var inferencePools = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// pool is what the source reads of an InferencePool.
type pool struct {
	selector labels.Selector
	port     int
}

// parsePool reads an InferencePool's selector and target port.
func parsePool(obj *unstructured.Unstructured) (pool, error) {
	match, found, err := unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return pool{}, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	if !found || len(match) == 0 {
		// An empty selector would select every pod of the namespace.
		return pool{}, errors.New("spec.selector.matchLabels is empty")
	}
	ports, _, err := unstructured.NestedSlice(obj.Object, "spec", "targetPorts")
	if err != nil {
		return pool{}, fmt.Errorf("spec.targetPorts: %w", err)
	}
	if len(ports) == 0 {
		return pool{}, errors.New("spec.targetPorts is empty")
	}
	first, _ := ports[0].(map[string]any)
	n, _, err := unstructured.NestedInt64(first, "number")
	if err != nil || n < 1 || n > 65535 {
		return pool{}, fmt.Errorf("spec.targetPorts[0].number %v is not a port", first["number"])
	}
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: match})
	if err != nil {
		return pool{}, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	return pool{selector: sel, port: int(n)}, nil
}

// poolListWatch lists and watches the InferencePool named name, telling fail of every call
// the API server refused or did not answer, as listWatch does for pods.
func (s *Source) poolListWatch(name string, fail func(error)) plainListWatch {
	pools := s.pools.Resource(inferencePools).Namespace(s.namespace)
	one := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		return o
	}
	return plainListWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			ctx, cancel := context.WithTimeout(ctx, listTimeout)
			defer cancel()
			list, err := pools.List(ctx, one(o))
			if err != nil {
				fail(fmt.Errorf("list inferencepools.%s %s in %s (is the InferencePool CRD installed, and may the source read it?): %w",
					inferencePools.Group, name, s.namespace, err))
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			dog := s.watchdog("inferencepool "+name, fail)
			w, err := pools.Watch(ctx, s.watchOptions(one(o)))
			if err != nil {
				dog.stop()
				fail(fmt.Errorf("watch inferencepools.%s %s in %s: %w", inferencePools.Group, name, s.namespace, err))
				return nil, err
			}
			return dog.wrap(w), nil
		},
	}}
}

// poolsNow is every watched pool as its informer holds it now, by name; a pool absent or
// unusable is missing, and logged once.
func (s *Source) poolsNow(informers map[string]cache.SharedIndexInformer) map[string]pool {
	out := map[string]pool{}
	for name, inf := range informers {
		var problem string
		items := inf.GetStore().List()
		if len(items) == 0 {
			problem = "no such InferencePool in the namespace: its roles select no pods"
		} else if obj, ok := items[0].(*unstructured.Unstructured); ok {
			p, err := parsePool(obj)
			if err == nil {
				out[name] = p
				delete(s.poolWarned, name)
				continue
			}
			problem = err.Error() + ": its roles select no pods"
		}
		if problem != "" && s.poolWarned[name] != problem {
			s.poolWarned[name] = problem
			s.log.Warn("inferencepool unusable", "inferencepool", name, "err", problem)
		}
	}
	return out
}
