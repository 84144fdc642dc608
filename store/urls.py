from django.urls import path

from store import api

urlpatterns = [
    path("store/items", api.StoreItemView.as_view(), name="store-items"),
    path("store/items/search", api.StoreItemSearchView.as_view(), name="store-item-search"),
    path("store/namespaces", api.StoreNamespaceListView.as_view(), name="store-namespaces"),
]
