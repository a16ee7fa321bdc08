"""Plain Kubernetes objects as dicts (pure: dict in, dict out): containers and pod specs shared
with the Volcano builders, and the Deployments, Services, Ingresses and ConfigMaps that the
tensorboard and serve steps create."""
