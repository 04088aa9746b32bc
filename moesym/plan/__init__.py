"""The plan: what a deployment means once resolved against a model and a GPU. Today its
validity rules (:mod:`.rules`)."""
