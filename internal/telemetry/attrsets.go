package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// AttrSets holds one metric option per combination of a measurement's
// labels, built the first time it is seen: metric.WithAttributes builds,
// sorts and deduplicates an attribute set on every call, which on the
// request path was a few percent of the api's allocations for labels that
// take a handful of values. K is the combination (a string, an array of
// them); its values must be bounded (names, outcomes, classes), never
// request data.
type AttrSets[K comparable] struct {
	build func(K) []attribute.KeyValue
	mu    sync.RWMutex
	sets  map[K]metric.MeasurementOption
}

// NewAttrSets returns the sets whose labels build makes from a key.
func NewAttrSets[K comparable](build func(K) []attribute.KeyValue) *AttrSets[K] {
	return &AttrSets[K]{build: build, sets: map[K]metric.MeasurementOption{}}
}

// Get returns the option carrying k's labels.
func (s *AttrSets[K]) Get(k K) metric.MeasurementOption {
	s.mu.RLock()
	o, ok := s.sets[k]
	s.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(s.build(k)...))
	s.mu.Lock()
	s.sets[k] = o
	s.mu.Unlock()
	return o
}
