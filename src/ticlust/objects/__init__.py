"""Objects cut out of a field of view: crops, masks and outlines from a label image, and the one objects route."""
