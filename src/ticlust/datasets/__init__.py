"""Bundled and generated samples: digits, glyphs, landmark shapes, nuclei fields and plates."""
