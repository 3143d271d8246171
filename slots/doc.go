// Package slots keeps the models a provider serves: one slot per loaded
// model, with its weights, its engine and its share of one KV budget.
package slots
