package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// resources are the kinds deploy/kubernetes holds, as the API server names them.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap":           {Version: "v1", Resource: "configmaps"},
	"Service":             {Version: "v1", Resource: "services"},
	"ServiceAccount":      {Version: "v1", Resource: "serviceaccounts"},
	"Deployment":          {Group: "apps", Version: "v1", Resource: "deployments"},
	"PodDisruptionBudget": {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	"Role":                {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"InferencePool":       inferencePools,
}

// Every manifest under deploy/kubernetes (kustomization files aside) is one a real API server
// accepts as written: created with a dry run and strict field validation, so an unknown or
// duplicated field, a bad probe, port or label is refused here rather than at `kubectl apply`.
// The ConfigMap the engines' kustomization generates from drain.py is created the same way.
func TestDeployManifestsPassTheAPIServer(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	a.installInferencePoolCRD()
	dc, err := dynamic.NewForConfigAndClient(a.adminConfig, a.adminHTTP)
	if err != nil {
		t.Fatal(err)
	}
	drain, err := os.ReadFile("../../../deploy/kubernetes/vllm/drain.py")
	if err != nil {
		t.Fatal(err)
	}
	type manifest struct {
		file string
		obj  *unstructured.Unstructured
	}
	objs := []manifest{{"vllm/kustomization.yaml's configMapGenerator", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "vllm-drain"}, "data": map[string]any{"drain.py": string(drain)}}}}}
	err = filepath.WalkDir("../../../deploy/kubernetes", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" || d.Name() == "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			objs = append(objs, manifest{path, obj})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range objs {
		obj := m.obj
		gvr, ok := resources[obj.GetKind()]
		if !ok {
			t.Errorf("%s %s (%s): a kind this test does not know", obj.GetKind(), obj.GetName(), m.file)
			continue
		}
		_, err := dc.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{
			DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			t.Errorf("%s %s (%s): %v", obj.GetKind(), obj.GetName(), m.file, err)
		}
	}
	if len(objs) < 10 {
		t.Fatalf("only %d manifests found under deploy/kubernetes", len(objs))
	}
	a.adminHTTP.CloseIdleConnections()
}
