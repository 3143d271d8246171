package model

// TensorSpec is one tensor a family's forward pass reads: its name as the
// family looks it up in Weights and its logical shape ([out, in] for a
// matrix, [experts, out, in] for stacked expert matrices). A manifest of
// them lets a loader check a checkpoint before uploading it, and lets a
// caller build stand-in weights of the right shapes from a config alone.
type TensorSpec struct {
	Name  string
	Shape []int
}
