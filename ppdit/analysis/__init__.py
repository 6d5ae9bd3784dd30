"""Numbers derived from traces and from the model's shapes: busy fractions, handoffs, bubbles."""
