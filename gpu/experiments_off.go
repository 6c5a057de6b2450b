//go:build !lowbitexp

package gpu

// readExperiments: the shipped binary runs no experiment.
func readExperiments() (experiments, error) { return experiments{}, nil }
