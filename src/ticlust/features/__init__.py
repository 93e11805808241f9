"""Fixed (untrained) image features: the scattering transform and its rotation-invariant form."""
