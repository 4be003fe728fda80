package deploy_test

// The Kubernetes base in k8s/, against the image and the code.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// ---------------------------------------------------------------------------
// Kubernetes.

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sObject struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	file       string
	node       *yaml.Node
}

func (o k8sObject) id() string { return o.file + " " + o.Kind + "/" + o.Metadata.Name }

// intOrString is a port (number or name) or a PDB count.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a name", n.Line)
	}
	*v = intOrString(n.Value)
	return nil
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type k8sKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string    `yaml:"name"`
		Value     yaml.Node `yaml:"value"`
		ValueFrom *struct {
			ConfigMapKeyRef *k8sKeyRef `yaml:"configMapKeyRef"`
			SecretKeyRef    *k8sKeyRef `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
			Exec    any `yaml:"exec"`
			HTTPGet any `yaml:"httpGet"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type k8sPodTemplate struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
		RestartPolicy                 string `yaml:"restartPolicy"`
		SecurityContext               struct {
			RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
			RunAsUser    *int64 `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers     []k8sContainer `yaml:"containers"`
		InitContainers []k8sContainer `yaml:"initContainers"`
	} `yaml:"spec"`
}

type k8sWorkload struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template                k8sPodTemplate `yaml:"template"`
		BackoffLimit            *int           `yaml:"backoffLimit"`
		TTLSecondsAfterFinished *int           `yaml:"ttlSecondsAfterFinished"`
	} `yaml:"spec"`
}

type k8sService struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string      `yaml:"name"`
			Port       int         `yaml:"port"`
			TargetPort intOrString `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		MinAvailable   *intOrString `yaml:"minAvailable"`
		MaxUnavailable *intOrString `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sHPA struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int `yaml:"minReplicas"`
		MaxReplicas int  `yaml:"maxReplicas"`
		Metrics     []struct {
			Type     string `yaml:"type"`
			Resource *struct {
				Name   string `yaml:"name"`
				Target struct {
					Type               string `yaml:"type"`
					AverageUtilization *int   `yaml:"averageUtilization"`
				} `yaml:"target"`
			} `yaml:"resource"`
		} `yaml:"metrics"`
	} `yaml:"spec"`
}

type k8sSet struct {
	objects    []k8sObject
	workloads  []k8sWorkload
	services   []k8sService
	pdbs       []k8sPDB
	hpas       []k8sHPA
	configMaps map[string]map[string]*yaml.Node // name -> key -> value node
	secrets    map[string]map[string]bool       // name -> keys
}

func (s *k8sSet) workload(kind, name string) *k8sWorkload {
	for i := range s.workloads {
		if s.workloads[i].Kind == kind && s.workloads[i].Metadata.Name == name {
			return &s.workloads[i]
		}
	}
	return nil
}

// yamlDocuments decodes every document of a YAML file.
func yamlDocuments(t *testing.T, file string) []*yaml.Node {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, file)
		if len(n.Content) > 0 && n.Content[0].Kind == yaml.MappingNode {
			docs = append(docs, &n)
		}
	}
	return docs
}

var (
	k8sOnce sync.Once
	k8sVal  *k8sSet
)

// loadK8s reads every Kubernetes object of every YAML file under deploy/
// (any document with apiVersion and kind other than the kustomization).
func loadK8s(t *testing.T) *k8sSet {
	t.Helper()
	k8sOnce.Do(func() {
		set := &k8sSet{configMaps: map[string]map[string]*yaml.Node{}, secrets: map[string]map[string]bool{}}
		err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			for _, doc := range yamlDocuments(t, p) {
				var o k8sObject
				if doc.Decode(&o) != nil || o.APIVersion == "" || o.Kind == "" || o.Kind == "Kustomization" {
					continue
				}
				o.file, o.node = filepath.ToSlash(p), doc
				set.objects = append(set.objects, o)
				switch o.Kind {
				case "Deployment", "Job", "StatefulSet", "DaemonSet":
					var w k8sWorkload
					require.NoError(t, doc.Decode(&w), o.id())
					w.k8sObject = o
					set.workloads = append(set.workloads, w)
				case "Service":
					var s k8sService
					require.NoError(t, doc.Decode(&s), o.id())
					s.k8sObject = o
					set.services = append(set.services, s)
				case "PodDisruptionBudget":
					var pdb k8sPDB
					require.NoError(t, doc.Decode(&pdb), o.id())
					pdb.k8sObject = o
					set.pdbs = append(set.pdbs, pdb)
				case "HorizontalPodAutoscaler":
					var h k8sHPA
					require.NoError(t, doc.Decode(&h), o.id())
					h.k8sObject = o
					set.hpas = append(set.hpas, h)
				case "ConfigMap":
					// Values kept as nodes, to check that each is a string.
					var cm struct {
						Data yaml.Node `yaml:"data"`
					}
					require.NoError(t, doc.Decode(&cm), o.id())
					data := map[string]*yaml.Node{}
					for i := 0; i+1 < len(cm.Data.Content); i += 2 {
						data[cm.Data.Content[i].Value] = cm.Data.Content[i+1]
					}
					set.configMaps[o.Metadata.Name] = data
				case "Secret":
					var sec struct {
						Data       map[string]string `yaml:"data"`
						StringData map[string]string `yaml:"stringData"`
					}
					require.NoError(t, doc.Decode(&sec), o.id())
					keys := map[string]bool{}
					for k := range sec.Data {
						keys[k] = true
					}
					for k := range sec.StringData {
						keys[k] = true
					}
					set.secrets[o.Metadata.Name] = keys
				}
			}
			return nil
		})
		require.NoError(t, err)
		k8sVal = set
	})
	require.NotNil(t, k8sVal)
	require.NotEmpty(t, k8sVal.objects, "Kubernetes objects under deploy/")
	return k8sVal
}

// k8sAppContainers returns every container of every workload, with the
// environment it gets (envFrom and valueFrom resolved against the ConfigMaps
// and Secrets of the set; an unresolved reference is an error).
func k8sAppContainers(t *testing.T, set *k8sSet) []appContainer {
	t.Helper()
	img := dockerImage(t)
	var out []appContainer
	for _, w := range set.workloads {
		for _, kc := range append(slices.Clone(w.Spec.Template.Spec.InitContainers), w.Spec.Template.Spec.Containers...) {
			where := w.id() + " container " + kc.Name
			c := appContainer{where: where, system: "k8s", image: kc.Image, env: map[string]string{}, ports: map[string]int{}, replicas: 1, shared: map[string]bool{}}
			if w.Spec.Replicas != nil {
				c.replicas = *w.Spec.Replicas
			}
			// Kubernetes: command replaces ENTRYPOINT and drops CMD; args replaces CMD.
			switch {
			case kc.Command != nil:
				c.entrypoint, c.args = kc.Command, kc.Args
			case kc.Args != nil:
				c.entrypoint, c.args = img.entrypoint, kc.Args
			default:
				c.entrypoint, c.args = img.entrypoint, img.cmd
			}
			for _, p := range kc.Ports {
				name := p.Name
				if name == "" {
					name = strconv.Itoa(p.ContainerPort)
				}
				c.ports[name] = p.ContainerPort
			}
			for _, ef := range kc.EnvFrom {
				switch {
				case ef.ConfigMapRef != nil:
					data, ok := set.configMaps[ef.ConfigMapRef.Name]
					assert.True(t, ok, "%s: envFrom ConfigMap %q is not defined", where, ef.ConfigMapRef.Name)
					for k, v := range data {
						c.env[k], c.shared[k] = v.Value, true
					}
				case ef.SecretRef != nil:
					keys, ok := set.secrets[ef.SecretRef.Name]
					assert.True(t, ok, "%s: envFrom Secret %q is not defined", where, ef.SecretRef.Name)
					for k := range keys {
						c.env[k], c.shared[k] = "", true
					}
				}
			}
			for _, e := range kc.Env {
				delete(c.shared, e.Name)
				switch {
				case e.Value.Kind != 0:
					assert.Equal(t, "!!str", e.Value.ShortTag(), "%s: env %s: value must be a string (quote it)", where, e.Name)
					c.env[e.Name] = e.Value.Value
				case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
					ref := e.ValueFrom.ConfigMapKeyRef
					v, ok := set.configMaps[ref.Name][ref.Key]
					if assert.True(t, ok, "%s: env %s: ConfigMap %s has no key %s", where, e.Name, ref.Name, ref.Key) {
						c.env[e.Name] = v.Value
					}
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
					ref := e.ValueFrom.SecretKeyRef
					assert.True(t, set.secrets[ref.Name][ref.Key], "%s: env %s: Secret %s has no key %s", where, e.Name, ref.Name, ref.Key)
					c.env[e.Name] = ""
				default:
					c.env[e.Name] = ""
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// selects reports whether a label selector matches the labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// resolvePort resolves a probe or Service target port against a
// container's ports.
func resolvePort(ports map[string]int, p intOrString) (int, bool) {
	if n, err := strconv.Atoi(string(p)); err == nil {
		return n, slices.Contains(slices.Collect(maps.Values(ports)), n)
	}
	n, ok := ports[string(p)]
	return n, ok
}

func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
		Namespace  string   `yaml:"namespace"`
	}
	data, err := os.ReadFile(kustomizationPath)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &k))
	assert.Equal(t, "Kustomization", k.Kind)
	assert.Empty(t, k.Namespace, "the base sets no namespace")

	// Every object file under k8s/ is listed, and nothing else.
	set := loadK8s(t)
	files := map[string]bool{}
	for _, o := range set.objects {
		assert.True(t, strings.HasPrefix(o.file, k8sDir+"/"), "%s: Kubernetes objects belong in %s/", o.id(), k8sDir)
		assert.Empty(t, o.Metadata.Namespace, "%s: namespace-less", o.id())
		files[strings.TrimPrefix(o.file, k8sDir+"/")] = true
	}
	listed := slices.Clone(k.Resources)
	slices.Sort(listed)
	assert.Equal(t, slices.Sorted(maps.Keys(files)), listed, "kustomization resources vs the files under %s/", k8sDir)
}

func TestKubernetes(t *testing.T) {
	facts := codeFactsT(t)
	set := loadK8s(t)
	img := dockerImage(t)
	containers := map[string]appContainer{}
	for _, c := range k8sAppContainers(t, set) {
		containers[c.where] = c
	}
	for _, cm := range set.configMaps {
		for k, v := range cm {
			assert.Equal(t, "!!str", v.ShortTag(), "ConfigMap key %s: values must be strings (quote it)", k)
		}
	}

	var api, reaper *k8sWorkload
	for i := range set.workloads {
		w := &set.workloads[i]
		pod := w.Spec.Template
		where := w.id()

		// Selector matches the pod template.
		if w.Kind != "Job" {
			assert.True(t, selects(w.Spec.Selector.MatchLabels, pod.Metadata.Labels), "%s: selector %v does not match the template labels %v", where, w.Spec.Selector.MatchLabels, pod.Metadata.Labels)
		}
		// Non-root, read-only, no capabilities.
		if assert.NotNil(t, pod.Spec.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", where) {
			assert.True(t, *pod.Spec.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", where)
		}
		if u := pod.Spec.SecurityContext.RunAsUser; u != nil {
			assert.Equal(t, img.uid, *u, "%s: runAsUser vs the Dockerfile's USER", where)
		}
		for _, kc := range pod.Spec.Containers {
			cw := where + " container " + kc.Name
			sc := kc.SecurityContext
			if assert.NotNil(t, sc, "%s: securityContext", cw) {
				assert.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", cw)
				assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation false", cw)
				assert.Contains(t, sc.Capabilities.Drop, "ALL", "%s: drop ALL capabilities", cw)
			}
			assert.NotEmpty(t, kc.Resources.Requests["cpu"], "%s: cpu request", cw)
			assert.NotEmpty(t, kc.Resources.Requests["memory"], "%s: memory request", cw)
			assert.NotEmpty(t, kc.Resources.Limits["memory"], "%s: memory limit", cw)

			c := containers[cw]
			// Probes: /readyz and /healthz of internal/httpapi on the API's port.
			for kind, p := range map[string]*k8sProbe{"readiness": kc.ReadinessProbe, "liveness": kc.LivenessProbe, "startup": kc.StartupProbe} {
				if p == nil {
					continue
				}
				assert.Nil(t, p.Exec, "%s: %s probe: exec needs a shell or tool the image does not have", cw, kind)
				var port intOrString
				switch {
				case p.HTTPGet != nil:
					port = p.HTTPGet.Port
					if assert.Equal(t, "api", c.binary(), "%s: %s probe: only the API serves HTTP health endpoints", cw, kind) {
						assert.True(t, facts.apiRoutes[p.HTTPGet.Path], "%s: %s probe path %s is not routed by internal/httpapi (%v)", cw, kind, p.HTTPGet.Path, slices.Sorted(maps.Keys(facts.apiRoutes)))
					}
				case p.TCPSocket != nil:
					port = p.TCPSocket.Port
				}
				n, ok := resolvePort(c.ports, port)
				if assert.True(t, ok, "%s: %s probe port %q is not a container port", cw, kind, port) {
					lp, _ := c.listenPort()
					assert.Equal(t, lp, n, "%s: %s probe port vs %s", cw, kind, listenEnv[c.binary()])
				}
			}
			if c.binary() == "api" && c.serves() {
				if assert.NotNil(t, kc.ReadinessProbe, "%s: readinessProbe", cw) && assert.NotNil(t, kc.ReadinessProbe.HTTPGet, "%s: readiness httpGet", cw) {
					assert.Equal(t, "/readyz", kc.ReadinessProbe.HTTPGet.Path, "%s: readiness on /readyz (PostgreSQL answers)", cw)
				}
				if assert.NotNil(t, kc.LivenessProbe, "%s: livenessProbe", cw) && assert.NotNil(t, kc.LivenessProbe.HTTPGet, "%s: liveness httpGet", cw) {
					assert.Equal(t, "/healthz", kc.LivenessProbe.HTTPGet.Path, "%s: liveness on /healthz (not the database)", cw)
				}
			}
			if kc.Lifecycle != nil && kc.Lifecycle.PreStop != nil {
				assert.Nil(t, kc.Lifecycle.PreStop.Exec, "%s: preStop exec needs a shell; use the sleep action", cw)
			}
			// Scrape annotations point at the /metrics listener.
			if port, ok := pod.Metadata.Annotations["prometheus.io/port"]; ok {
				lp, _ := c.metricsPort()
				assert.Equal(t, strconv.Itoa(lp), port, "%s: prometheus.io/port vs the /metrics listener", cw)
				assert.Equal(t, "/metrics", pod.Metadata.Annotations["prometheus.io/path"], "%s: prometheus.io/path", cw)
			}
			switch {
			case c.binary() == "api" && c.serves() && w.Kind == "Deployment":
				assert.Nil(t, api, "one api Deployment")
				api = w
			case c.binary() == "reaper" && w.Kind == "Deployment":
				assert.Nil(t, reaper, "one reaper Deployment")
				reaper = w
			case c.binary() == "api" && len(c.args) > 0 && c.args[0] == "migrate":
				assert.Equal(t, "Job", w.Kind, "%s: migrate runs as a Job", cw)
				assert.NotNil(t, w.Spec.BackoffLimit, "%s: backoffLimit", where)
				assert.Contains(t, []string{"Never", "OnFailure"}, pod.Spec.RestartPolicy, "%s: restartPolicy", where)
			}
		}
	}

	// api: two replicas, grace longer than the drain (and the preStop sleep).
	require.NotNil(t, api, "an api Deployment")
	if assert.NotNil(t, api.Spec.Replicas) {
		assert.Equal(t, 2, *api.Spec.Replicas, "api replicas")
	}
	var preStop time.Duration
	for _, kc := range api.Spec.Template.Spec.Containers {
		if kc.Lifecycle != nil && kc.Lifecycle.PreStop != nil && kc.Lifecycle.PreStop.Sleep != nil {
			preStop = time.Duration(kc.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if g := api.Spec.Template.Spec.TerminationGracePeriodSeconds; assert.NotNil(t, g, "api terminationGracePeriodSeconds") {
		assert.Greater(t, time.Duration(*g)*time.Second, preStop+facts.shutdownTimeout,
			"api terminationGracePeriodSeconds vs preStop sleep %s + cmd/api ShutdownTimeout %s", preStop, facts.shutdownTimeout)
	}
	require.NotNil(t, reaper, "a reaper Deployment")
	if assert.NotNil(t, reaper.Spec.Replicas) {
		assert.Equal(t, 2, *reaper.Spec.Replicas, "reaper replicas")
	}
	if g := reaper.Spec.Template.Spec.TerminationGracePeriodSeconds; assert.NotNil(t, g, "reaper terminationGracePeriodSeconds") {
		assert.Greater(t, time.Duration(*g)*time.Second, facts.shutdownTimeout, "reaper terminationGracePeriodSeconds")
	}
	assert.NotNil(t, set.workload("Job", migrateJob), "a migrate Job")

	// podsOf returns the workloads whose pods a selector matches.
	podsOf := func(selector map[string]string) []*k8sWorkload {
		var out []*k8sWorkload
		for i := range set.workloads {
			if selects(selector, set.workloads[i].Spec.Template.Metadata.Labels) {
				out = append(out, &set.workloads[i])
			}
		}
		return out
	}

	// PDB and HPA target the api Deployment (and nothing else).
	require.Len(t, set.pdbs, 1, "one PodDisruptionBudget")
	pdb := set.pdbs[0]
	assert.Equal(t, []*k8sWorkload{api}, podsOf(pdb.Spec.Selector.MatchLabels), "PDB selects exactly the api pods")
	if assert.NotNil(t, pdb.Spec.MinAvailable, "PDB minAvailable") {
		assert.Equal(t, intOrString("1"), *pdb.Spec.MinAvailable)
	}
	require.Len(t, set.hpas, 1, "one HorizontalPodAutoscaler")
	hpa := set.hpas[0]
	assert.Equal(t, "autoscaling/v2", hpa.APIVersion)
	assert.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
	assert.Equal(t, "apps/v1", hpa.Spec.ScaleTargetRef.APIVersion)
	assert.Equal(t, api.Metadata.Name, hpa.Spec.ScaleTargetRef.Name, "HPA scales the api Deployment")
	if assert.NotNil(t, hpa.Spec.MinReplicas) {
		assert.Equal(t, 2, *hpa.Spec.MinReplicas)
	}
	assert.Equal(t, 10, hpa.Spec.MaxReplicas)
	if assert.Len(t, hpa.Spec.Metrics, 1) && assert.NotNil(t, hpa.Spec.Metrics[0].Resource) {
		r := hpa.Spec.Metrics[0].Resource
		assert.Equal(t, "cpu", r.Name)
		assert.Equal(t, "Utilization", r.Target.Type)
		if assert.NotNil(t, r.Target.AverageUtilization) {
			assert.Equal(t, 70, *r.Target.AverageUtilization)
		}
	}

	// Services select the pods of one workload and target its ports.
	services := map[string]int{} // name -> port, for URLs below
	for _, s := range set.services {
		ws := podsOf(s.Spec.Selector)
		if !assert.Len(t, ws, 1, "%s: selector %v must match the pods of exactly one workload", s.id(), s.Spec.Selector) {
			continue
		}
		require.NotEmpty(t, s.Spec.Ports, s.id())
		for _, sp := range s.Spec.Ports {
			target := sp.TargetPort
			if target == "" {
				target = intOrString(strconv.Itoa(sp.Port))
			}
			var found bool
			for _, kc := range ws[0].Spec.Template.Spec.Containers {
				c := containers[ws[0].id()+" container "+kc.Name]
				if n, ok := resolvePort(c.ports, target); ok {
					found = true
					services[s.Metadata.Name] = sp.Port
					lp, _ := c.listenPort()
					assert.Equal(t, lp, n, "%s: targetPort vs %s", s.id(), listenEnv[c.binary()])
				}
			}
			assert.True(t, found, "%s: targetPort %q is no container port of %s", s.id(), target, ws[0].id())
		}
	}
	assert.Contains(t, services, api.Metadata.Name, "a Service for the api")

	// PSP_URL names a Service of this base (the mock) on its port, or an
	// outside host.
	for _, c := range containers {
		if v := c.env["PSP_URL"]; v != "" {
			u, err := url.Parse(v)
			require.NoError(t, err)
			if p, ok := services[u.Hostname()]; ok {
				assert.Equal(t, p, portOf(u), "%s: PSP_URL port vs Service %s", c.where, u.Hostname())
			}
		}
	}
}

// TestKustomizeBuild renders the base with kubectl, when it is installed.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; the structural checks above are what runs here")
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).CombinedOutput()
	require.NoError(t, err, "kubectl kustomize %s:\n%s", k8sDir, out)
	dec := yaml.NewDecoder(bytes.NewReader(out))
	var n int
	for {
		var v map[string]any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			break
		} else if !assert.NoError(t, err) {
			break
		}
		if v != nil {
			n++
		}
	}
	assert.Len(t, loadK8s(t).objects, n, "objects rendered by kubectl kustomize vs the files")
}

// migrateJob is the base's migrate Job: "migrate-" + its image's tag.
const migrateJob = "migrate-latest"

// releaseOverlay is the example overlay that pins a tag.
const releaseOverlay = "overlays/release"

// A Job's pod template is immutable, so a second `kubectl apply` of the same
// Job name with a new image fails. The migrate Job therefore carries the
// image's tag in its name: in the base, and in an overlay that sets a tag,
// through the overlay's replacements (which kustomize runs after its images
// transformer). Applying one release twice renders the same Job; a new
// release renders a new one.
func TestMigrateJobNameCarriesTheImageTag(t *testing.T) {
	set := loadK8s(t)
	job := set.workload("Job", migrateJob)
	require.NotNil(t, job, "the migrate Job is named %s", migrateJob)
	var image string
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == "migrate" {
			image = c.Image
		}
	}
	_, tag := imageRepo(image)
	require.NotEmpty(t, tag, "the migrate container's image has a tag")
	assert.Equal(t, migrateJob, "migrate-"+tag, "the Job's name is migrate-<image tag>")
	if assert.NotNil(t, job.Spec.TTLSecondsAfterFinished, "finished Jobs are cleaned up") {
		assert.Positive(t, *job.Spec.TTLSecondsAfterFinished)
	}

	// The overlay renames the Job from the tag it sets.
	var overlay struct {
		Resources []string `yaml:"resources"`
		Images    []struct {
			Name   string `yaml:"name"`
			NewTag string `yaml:"newTag"`
		} `yaml:"images"`
		Replacements []struct {
			Source struct {
				Kind      string `yaml:"kind"`
				Name      string `yaml:"name"`
				FieldPath string `yaml:"fieldPath"`
				Options   struct {
					Delimiter string `yaml:"delimiter"`
					Index     int    `yaml:"index"`
				} `yaml:"options"`
			} `yaml:"source"`
			Targets []struct {
				Select struct {
					Kind string `yaml:"kind"`
					Name string `yaml:"name"`
				} `yaml:"select"`
				FieldPaths []string `yaml:"fieldPaths"`
				Options    struct {
					Delimiter string `yaml:"delimiter"`
					Index     int    `yaml:"index"`
				} `yaml:"options"`
			} `yaml:"targets"`
		} `yaml:"replacements"`
	}
	kfile := filepath.Join(releaseOverlay, "kustomization.yaml")
	b, err := os.ReadFile(kfile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &overlay), kfile)
	assert.Equal(t, []string{"../../" + k8sDir}, overlay.Resources, "%s builds on the base", kfile)
	require.Len(t, overlay.Images, 1, kfile)
	repo, _ := imageRepo(image)
	assert.Equal(t, repo, overlay.Images[0].Name, kfile)
	newTag := overlay.Images[0].NewTag
	require.NotEmpty(t, newTag, kfile)
	require.Len(t, overlay.Replacements, 1, "%s: the replacement that renames the migrate Job", kfile)
	r := overlay.Replacements[0]
	assert.Equal(t, "Job", r.Source.Kind, kfile)
	assert.Equal(t, migrateJob, r.Source.Name, kfile)
	assert.Equal(t, "spec.template.spec.containers.[name=migrate].image", r.Source.FieldPath, kfile)
	assert.Equal(t, ":", r.Source.Options.Delimiter, kfile)
	assert.Equal(t, 1, r.Source.Options.Index, "%s: the tag after the colon", kfile)
	require.Len(t, r.Targets, 1, kfile)
	assert.Equal(t, "Job", r.Targets[0].Select.Kind, kfile)
	assert.Equal(t, migrateJob, r.Targets[0].Select.Name, kfile)
	assert.Equal(t, []string{"metadata.name"}, r.Targets[0].FieldPaths, kfile)
	assert.Equal(t, "-", r.Targets[0].Options.Delimiter, kfile)
	assert.Equal(t, 1, r.Targets[0].Options.Index, "%s: the part after migrate-", kfile)

	// Where kubectl is installed, render it: kustomize must run the
	// overlay's images before its replacements for the name to follow.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "kustomize", releaseOverlay).CombinedOutput()
		require.NoError(t, err, "kubectl kustomize %s:\n%s", releaseOverlay, out)
		var jobs []string
		dec := yaml.NewDecoder(bytes.NewReader(out))
		for {
			var o k8sWorkload
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if !assert.NoError(t, err) {
				break
			}
			if o.Kind == "Job" {
				jobs = append(jobs, o.Metadata.Name+" "+o.Spec.Template.Spec.Containers[0].Image)
			}
		}
		assert.Equal(t, []string{"migrate-" + newTag + " " + repo + ":" + newTag}, jobs)
	}
}
