"""The GPU fabric health mask: moved to :mod:`nvfabric.model.mask` (a value decoding shared by
the readers in facts/, the GPU values in model/ and the verdict); re-exported here."""

from nvfabric.model.mask import (
    FIELDS,
    NA_WORDS,
    SUMMARY,
    HealthField,
    Impact,
    MaskField,
    decode_mask,
    decode_smi,
    summary_from_smi,
)

__all__ = ["FIELDS", "NA_WORDS", "SUMMARY", "HealthField", "Impact", "MaskField", "decode_mask",
           "decode_smi", "summary_from_smi"]
