package charges

// The request limits, for the test that holds them equal to api/openapi.yaml.
const (
	MaxDescription        = maxDescription
	MaxMetadataKeys       = maxMetadataKeys
	MaxMetadataKeyLength  = maxMetadataKeyLength
	MaxMetadataValue      = maxMetadataValue
	MaxPaymentMethodChars = maxPaymentMethodChars
	CurrencyPattern       = currencyPattern
	PaymentMethodPattern  = paymentMethodPattern
)
