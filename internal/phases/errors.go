package phases

import "errors"

// ErrObjectIDTaken is a derived object id held by an earlier incarnation
// of the key. That is the same key and request, claimed again after
// retention forgot the key.
//
// The operation's storage returns it, wrapped, from the phase that inserts
// the object. The engine rolls the transaction back and derives the next
// incarnation's id (ObjectIDAttempts).
var ErrObjectIDTaken = errors.New("object id taken by an earlier incarnation of the key")

// ErrNoOperation is a key whose claim names no registered operation.
var ErrNoOperation = errors.New("no operation registered under the key's name")
